"""The one contract between the recipe's agent loops, its reward function and its trainer: :class:`SampleFields`.

verl 0.7 carries what an agent loop observed as a plain dict: ``AgentLoopOutput.extra_fields``. The reward loop
hands it to ``reward_fn.compute_score`` merged into the row's ``extra_info``, and the worker's post-processing turns
it into ``non_tensor_batch`` columns that the trainer reads. This module is the only place that knows those keys:

* writers (``agent_loops``, ``episodes.failed_episode_output``) build a :class:`SampleFields` and call
  :meth:`SampleFields.to_extra_fields`;
* the reward reads it back with :meth:`SampleFields.from_extra_info` (the one validation: a missing or bad key is a
  :class:`SampleFieldsError` naming it);
* the worker and the trainer read batch columns with :meth:`SampleFields.from_batch` and the column names below.

Which keys a sample carries follows its role (exactly what the loops wrote before this module existed):
every sample carries the reward's core keys and ``vsearch_role``; a policy trajectory (``outloop`` / ``inloop``)
adds ``crop_boxes`` / ``frame_size`` / ``image_size``; an out-of-loop sample adds its ground truth ``bboxes``; a
sample of an in-loop episode, and every placeholder, adds ``call_index`` / ``feedback`` and the episode statistics
``episode_*`` (:class:`EpisodeStats`). The worker fills the keys a sample lacks with None (:data:`OPTIONAL_KEYS`), so
that verl's ``DataProto.concat`` sees the same columns from every worker.

Also here: the row keys the trainer adds for the loops (:data:`EPISODE_ID_KEY`, :data:`VALIDATE_KEY`), verl's row
identity copied onto every sample (:data:`ROW_KEYS`, :func:`with_row_identity`) and the uid that marks an in-loop
sample for ``vsearch_hybrid_grpo`` (:func:`inloop_uid`). Pure Python: the reward function imports it without verl.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, fields
from typing import Any

#: ``extra_fields`` key of an episode's samples after its first (the worker expands them into rows)
EXTRA_SAMPLES_KEY = "vsearch_extra_samples"
#: key/column of a sample's role
ROLE_KEY = "vsearch_role"
ROLE_OUTLOOP, ROLE_INLOOP, ROLE_PLACEHOLDER, ROLE_PADDING = "outloop", "inloop", "placeholder", "padding"
ROLES = (ROLE_OUTLOOP, ROLE_INLOOP, ROLE_PLACEHOLDER, ROLE_PADDING)
#: input column naming the episode of each rollout row (``<uid>-<j>``, set by the trainer: the n repeats of
#: one QA item share the uid but are distinct episodes); the in-loop loop falls back to the uid
EPISODE_ID_KEY = "vsearch_episode_id"
#: input column telling the agent loops that a rollout belongs to a validation pass (set by the trainer on
#: every generation batch; verl 0.7 passes only sampling parameters, not ``meta_info["validate"]``, to a loop)
VALIDATE_KEY = "vsearch_validate"
#: row identity copied from the input row onto every sample of its episode
ROW_KEYS = ("uid", "data_source", "reward_model", "extra_info", "index", "agent_name")
#: prefix of an in-loop sample's uid (how ``vsearch_hybrid_grpo`` tells in-loop samples: verl passes it the uids)
INLOOP_UID_PREFIX = "inloop-"

_EPISODE_PREFIX = "episode_"
_KINDS = {"str": str, "int": int, "bool": bool}  # EpisodeStats' field types (annotations are strings here)
_CORE = ("n_tool", "format_ok", "format_error", "pred_box", "search_status", "search_truncated")
_TRAJECTORY = ("crop_boxes", "frame_size", "image_size")
_SAMPLE = ("is_in_loop", "feedback_helpful", "answer_correct")
_IN_EPISODE = ("call_index", "feedback")
_FATAL = ("fatal_step", "fatal_from")


class SampleFieldsError(KeyError):
    """A sample's fields lack a key or hold a bad value; the message names the key."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def episode_id(uid: str, repeat: int) -> str:
    """The id of the ``repeat``-th episode of the QA item ``uid`` (the trainer's :data:`EPISODE_ID_KEY`)."""
    return f"{uid}-{repeat}"


def episode_item(episode: str) -> str:
    """The QA item uid of an :func:`episode_id` (the group of the item's ``n`` episodes)."""
    return str(episode).rsplit("-", 1)[0]


def inloop_uid(episode_uid: str, call_index: int) -> str:
    """The uid of the ``call_index``-th vSearcher sample of an in-loop episode."""
    return f"{INLOOP_UID_PREFIX}{episode_uid}-{call_index}"


def is_inloop_uid(uid: Any) -> bool:
    return isinstance(uid, str) and uid.startswith(INLOOP_UID_PREFIX)


@dataclass(frozen=True)
class EpisodeStats:
    """Statistics of one in-loop episode, repeated on each of its samples (keys ``episode_<name>``)."""

    id: str
    n_calls: int
    has_answer: bool
    correct: bool
    critical_failure: bool
    status: str
    n_feedback: int

    @classmethod
    def of(
        cls,
        episode_id: str,
        *,
        n_calls: int,
        has_answer: bool,
        correct: bool,
        critical_failure: bool,
        status: str,
        n_feedback: int,
    ) -> EpisodeStats:
        return cls(
            str(episode_id),
            int(n_calls),
            bool(has_answer),
            bool(correct),
            bool(critical_failure),
            str(status),
            int(n_feedback),
        )

    def to_extra_fields(self) -> dict[str, Any]:
        return {_EPISODE_PREFIX + f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_extra_info(cls, info: Mapping[str, Any]) -> EpisodeStats | None:
        """None when the sample belongs to no in-loop episode (no ``episode_id``)."""
        if info.get(EPISODE_KEYS[0]) is None:
            return None
        return cls(**{f.name: _convert(info, _EPISODE_PREFIX + f.name, _KINDS[str(f.type)]) for f in fields(cls)})


#: the ``episode_*`` keys, in :class:`EpisodeStats` order
EPISODE_KEYS = tuple(_EPISODE_PREFIX + f.name for f in fields(EpisodeStats))


@dataclass(frozen=True)
class SampleFields:
    """What an agent loop reports about one training sample (the reward's inputs and the trainer's statistics).

    ``n_tool`` .. ``search_truncated``: the vSearcher session's verdict (``LocateResult``; ``format_ok`` is r_format,
    ``pred_box`` the found box in original pixels); ``crop_boxes`` / ``frame_size``: the model's ``bbox_2d`` of every
    executed crop and the model frame they refer to, ``image_size`` the original image (the ``original`` reward);
    ``is_in_loop`` / ``feedback_helpful`` (s) / ``answer_correct`` (c): r̂_IoU = 1[s = c = 1]; ``bboxes``: the
    out-of-loop ground truth; ``call_index`` / ``feedback``: the call's place and rating in its episode;
    ``critical_failure``: the episode was cut by an API failure or an exception (masked out of the loss);
    ``fatal_step`` / ``fatal_from``: a vSearcher episode stopped at its fatal step (fatal-aware GRPO,
    ``vsearch.fatal``): the 0-based turn where its run of consecutive tool errors began, and the response position
    from which the trainer masks its tokens (None: not fatal)."""

    n_tool: int = 0
    format_ok: bool = False
    format_error: str | None = None
    pred_box: list[float] | None = None
    search_status: str | None = None
    search_truncated: bool = False
    crop_boxes: list[list[float]] | None = None
    frame_size: list[int] | None = None
    image_size: list[int] | None = None
    is_in_loop: bool = False
    feedback_helpful: bool | None = None
    answer_correct: bool | None = None
    bboxes: Any = None  # as the dataset row holds them (lists or numpy arrays of boxes)
    call_index: int | None = None
    feedback: str | None = None
    role: str = ROLE_OUTLOOP
    critical_failure: bool = False
    episode: EpisodeStats | None = None
    fatal_step: int | None = None
    fatal_from: int | None = None

    # ------------------------------------------------------------------ writing
    def to_extra_fields(self) -> dict[str, Any]:
        """``AgentLoopOutput.extra_fields`` of this sample: the keys its role carries (see the module doc)."""
        if self.role not in (ROLE_OUTLOOP, ROLE_INLOOP, ROLE_PLACEHOLDER):
            raise SampleFieldsError(
                f"{ROLE_KEY}: an agent loop writes outloop, inloop or placeholder, not {self.role!r}"
            )
        if (self.episode is None) != (self.role == ROLE_OUTLOOP):
            raise SampleFieldsError(
                f"{ROLE_KEY}={self.role!r}: episode statistics go with in-loop samples and placeholders"
            )
        has_trajectory = self.role != ROLE_PLACEHOLDER
        if has_trajectory and (self.crop_boxes is None or self.frame_size is None):
            raise SampleFieldsError(f"{ROLE_KEY}={self.role!r}: a policy trajectory reports crop_boxes and frame_size")
        keys = [*_CORE, *(_TRAJECTORY if has_trajectory else ()), *_SAMPLE]
        keys += ["bboxes"] if self.role == ROLE_OUTLOOP else list(_IN_EPISODE)
        out = {k: getattr(self, k) for k in keys}
        out[ROLE_KEY] = self.role
        out["critical_failure"] = self.critical_failure
        if self.fatal_step is not None:  # only under vsearch.fatal (the worker fills None for the others)
            out.update({k: getattr(self, k) for k in _FATAL})
        if self.episode is not None:
            out.update(self.episode.to_extra_fields())
        return out

    # ------------------------------------------------------------------ reading
    @classmethod
    def from_extra_info(
        cls, info: Mapping[str, Any], *, variant: str | None = None, data_source: Any = None
    ) -> SampleFields:
        """The fields of one sample from the reward's ``extra_info`` (the row's, updated with the loop's
        ``extra_fields``): ``n_tool`` and ``format_ok`` are required, an out-of-loop sample needs ``bboxes``;
        with ``variant="original"`` also what that reward reads (``crop_boxes`` / ``frame_size`` after a crop,
        ``image_size`` out-of-loop). A missing or bad key is a :class:`SampleFieldsError` naming it."""
        where = f"vsearch reward ({variant}) for data_source={data_source!r}"
        missing = [k for k in ("n_tool", "format_ok") if info.get(k) is None]
        in_loop = bool(info.get("is_in_loop"))
        if not missing and not in_loop and info.get("bboxes") is None:
            raise SampleFieldsError(
                f"out-of-loop vsearch sample (data_source={data_source!r}) has no extra_info.bboxes"
            )
        if variant == "original" and not missing:
            need = (["crop_boxes", "frame_size"] if _convert(info, "n_tool", int) > 0 else []) + (
                [] if in_loop else ["image_size"]
            )
            missing = [k for k in need if info.get(k) is None]
        if missing:
            raise SampleFieldsError(
                f"{where}: extra_info lacks {missing}; the vSearcher agent loop must report them in "
                "AgentLoopOutput.extra_fields"
            )
        return cls._read(info)

    @classmethod
    def from_batch(
        cls, non_tensor_batch: Mapping[str, Any], n: int, keys: Iterable[str] | None = None
    ) -> list[SampleFields]:
        """The fields of each of a batch's ``n`` rows, from its ``non_tensor_batch`` columns (only ``keys``, e.g.
        :data:`METRIC_KEYS`, when given). The rows were checked by the reward (:meth:`from_extra_info`); an absent
        column or a None value reads as the default (a row without a role is ``outloop``)."""
        wanted = ALL_KEYS if keys is None else tuple(keys)
        names = [k for k in wanted if k in non_tensor_batch]
        return [cls._read({k: non_tensor_batch[k][i] for k in names}) for i in range(n)]

    @classmethod
    def _read(cls, info: Mapping[str, Any]) -> SampleFields:
        role = info.get(ROLE_KEY)
        return cls(
            n_tool=_convert(info, "n_tool", int, 0),
            format_ok=_convert(info, "format_ok", bool, False),
            format_error=info.get("format_error"),
            pred_box=_floats(info, "pred_box", 4),
            search_status=info.get("search_status"),
            search_truncated=_convert(info, "search_truncated", bool, False),
            crop_boxes=_boxes(info, "crop_boxes"),
            frame_size=_ints(info, "frame_size"),
            image_size=_ints(info, "image_size"),
            is_in_loop=_convert(info, "is_in_loop", bool, False),
            feedback_helpful=_convert(info, "feedback_helpful", bool, None),
            answer_correct=_convert(info, "answer_correct", bool, None),
            bboxes=info.get("bboxes"),
            call_index=_convert(info, "call_index", int, None),
            feedback=info.get("feedback"),
            role=ROLE_OUTLOOP if role is None else str(role),
            critical_failure=_convert(info, "critical_failure", bool, False),
            episode=EpisodeStats.from_extra_info(info),
            fatal_step=_convert(info, "fatal_step", int, None),
            fatal_from=_convert(info, "fatal_from", int, None),
        )


def episode_fields(episode_id: str, **stats: Any) -> dict[str, Any]:
    """The ``episode_*`` keys of :meth:`EpisodeStats.of` (for code that builds rows by hand: tests, tools)."""
    return EpisodeStats.of(episode_id, **stats).to_extra_fields()


#: every key of the contract (``extra_fields`` / ``extra_info`` / batch columns)
ALL_KEYS = (
    *_CORE,
    *_TRAJECTORY,
    *_SAMPLE,
    "bboxes",
    *_IN_EPISODE,
    ROLE_KEY,
    "critical_failure",
    *EPISODE_KEYS,
    *_FATAL,
)
#: keys only some samples carry (the worker sets the others' to None)
OPTIONAL_KEYS = ("bboxes", *_IN_EPISODE, *_TRAJECTORY, *EPISODE_KEYS, *_FATAL)
#: the columns the step and validation metrics read (``episodes.episode_metrics``; the trainer's validation view)
METRIC_KEYS = (ROLE_KEY, *EPISODE_KEYS, "feedback_helpful", "answer_correct")


def with_row_identity(extra_fields: MutableMapping[str, Any], row: Mapping[str, Any]) -> None:
    """Copy verl's row identity (:data:`ROW_KEYS`) from the input ``row`` onto one sample's ``extra_fields`` and give
    a sample of an in-loop episode (and a placeholder) its in-loop uid ``inloop-<episode id>-<call index>``."""
    for key in ROW_KEYS:
        if key in row:
            extra_fields.setdefault(key, row[key])
    if extra_fields.get(ROLE_KEY) in (ROLE_INLOOP, ROLE_PLACEHOLDER):
        extra_fields["uid"] = inloop_uid(
            str(extra_fields.get(EPISODE_KEYS[0], row.get("uid"))), int(extra_fields.get("call_index", 0))
        )


def fill_optional(extra_fields: MutableMapping[str, Any]) -> None:
    """Set the :data:`OPTIONAL_KEYS` a sample lacks to None (every worker's rows get the same columns)."""
    for key in OPTIONAL_KEYS:
        extra_fields.setdefault(key, None)


def attach_extra_samples(first: Any, others: list) -> Any:
    """Carry an episode's samples after the first in the first one's ``extra_fields`` (verl takes one output)."""
    first.extra_fields[EXTRA_SAMPLES_KEY] = others
    return first


def pop_extra_samples(output: Any) -> list:
    """The samples :func:`attach_extra_samples` carried, removed from ``output``."""
    return output.extra_fields.pop(EXTRA_SAMPLES_KEY, None) or []


def role_of(extra_fields: Mapping[str, Any]) -> str | None:
    return extra_fields.get(ROLE_KEY)


# ----------------------------------------------------------------------------- value conversion
_MISSING = object()


def _convert(info: Mapping[str, Any], key: str, kind: type, default: Any = _MISSING) -> Any:
    value = info.get(key)
    if value is None:
        if default is _MISSING:
            raise SampleFieldsError(f"{key}: required, got None")
        return default
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise SampleFieldsError(f"{key}: expected {kind.__name__}, got {value!r}") from None


def _floats(info: Mapping[str, Any], key: str, n: int | None = None) -> list[float] | None:
    value = info.get(key)
    if value is None:
        return None
    try:
        out = [float(v) for v in value]
    except (TypeError, ValueError):
        raise SampleFieldsError(f"{key}: expected a list of numbers, got {value!r}") from None
    if n is not None and len(out) != n:
        raise SampleFieldsError(f"{key}: expected {n} numbers, got {value!r}")
    return out


def _ints(info: Mapping[str, Any], key: str) -> list[int] | None:
    value = _floats(info, key, 2)
    if value is not None and any(v != int(v) for v in value):
        raise SampleFieldsError(f"{key}: expected [width, height] in whole pixels, got {info.get(key)!r}")
    return None if value is None else [int(v) for v in value]


def _boxes(info: Mapping[str, Any], key: str) -> list[list[float]] | None:
    value = info.get(key)
    if value is None:
        return None
    try:
        return [_floats({key: box}, key) or [] for box in value]
    except TypeError:
        raise SampleFieldsError(f"{key}: expected a list of boxes, got {value!r}") from None
