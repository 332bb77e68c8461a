"""Where an image named by an input file may be: inside the image directory the user gave.

An annotation file names its images relative to ``--img_dir``. A hostile (or careless) file could name
``/home/me/.ssh/id.png``, ``../../outside/secret.png`` or a symlink pointing out of the directory, and the
harness would read that image and send it to the endpoint. :func:`resolve_image_path` is the one check every
loader of images named by a file uses (``evaluation.samples.load_samples``, ``evaluation.vsearch_eval.
load_regions``): the name must be relative, and the path, with every symlink resolved, must stay inside the
directory (itself resolved). ``allow_outside=True`` (the commands' ``--allow_outside_img_dir``) turns the
check off and keeps the earlier behaviour (``os.path.join``: an absolute name is used as is).

The returned path is the joined one (``img_dir/name``), not the resolved one, so records keep naming the image
as the file did. The check looks at the file system when the loader runs; a symlink changed afterwards is not
seen (the loaders run before any request is sent).
"""

from __future__ import annotations

import os

#: The flag that turns the check off (named in every refusal).
ALLOW_OUTSIDE_FLAG = "--allow_outside_img_dir"


class OutsideImageDir(ValueError):
    """An image name that resolves outside the image directory; the message says why (no file or line:
    the loader adds those)."""


def resolve_image_path(img_dir: str | os.PathLike, name: str, *, allow_outside: bool = False) -> str:
    """``img_dir/name``, checked to stay inside ``img_dir`` unless ``allow_outside``; raises
    :class:`OutsideImageDir` (an absolute name, a ``..`` that leaves the directory, a symlink whose target
    is outside)."""
    root = os.fspath(img_dir)
    path = os.path.join(root, name)
    if allow_outside:
        return path
    if os.path.isabs(name):
        raise OutsideImageDir(f"absolute path {name!r} (image paths must be relative to the image directory)")
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
        how = "a symlink on the way points" if _has_link(root, name) else "'..' leads"
        raise OutsideImageDir(f"{name!r} resolves to {real}, outside the image directory {real_root} ({how} out)")
    return path


def _has_link(root: str, name: str) -> bool:
    """Whether a component of ``name`` under ``root`` is a symlink (for the message only)."""
    cur = root
    for part in name.replace("\\", "/").split("/"):
        cur = os.path.join(cur, part)
        if os.path.islink(cur):
            return True
    return False


def outside_message(where: str, field: str, error: OutsideImageDir) -> str:
    """The bad-input line of a refused image name: ``<file>:<line>: field '<field>': <why>; pass ...``."""
    return f"{where}: field '{field}': image path outside the image directory: {error}; pass {ALLOW_OUTSIDE_FLAG} to allow it"


class BadOutputName(ValueError):
    """A name that must stay below an output directory but would not (or names nothing); the message says why."""


def check_output_name(name: str) -> str:
    """``name`` unchanged when it is a non-empty relative path that stays below the directory it is joined to:
    refused (:class:`BadOutputName`) when empty or blank, absolute (``/o3_bench``: what ``--eval_name
    "$MODEL/o3_bench"`` becomes with ``$MODEL`` unset), with a ``..`` or an empty component, or holding a NUL."""
    if not name.strip():
        raise BadOutputName("must not be empty")
    if "\0" in name:
        raise BadOutputName(f"{name!r} holds a NUL character")
    if os.path.isabs(name) or name.startswith(("/", "\\", "~")):
        raise BadOutputName(f"{name!r} is an absolute path; it must be relative to the output directory")
    parts = name.replace("\\", "/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        bad = next(p for p in parts if p in ("", ".", ".."))
        raise BadOutputName(
            f"{name!r} has a {'empty' if not bad else repr(bad)} path component; it must name a directory below the "
            "output directory (an unset shell variable such as $MODEL leaves one)"
        )
    return name
