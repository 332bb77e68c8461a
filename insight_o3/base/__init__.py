"""The bottom layer: values every other layer may use and that import nothing of the package.

Caps on what a run accepts (:mod:`.caps`), exit codes (:mod:`.exit_codes`), image-path confinement
(:mod:`.paths`), secrets and their redaction (:mod:`.redaction`), what a server sent made storable
(:mod:`.untrusted`), the run-integrity kind a setting declares (:mod:`.setting_kinds`), linear-time scanners for text a model or a server wrote (:mod:`.text_scan`), the worker
processes the library starts (:mod:`.workers`), and the one alias for an open JSON object (:mod:`.json_types`).
"""

__all__ = [
    "caps",
    "exit_codes",
    "json_types",
    "paths",
    "redaction",
    "setting_kinds",
    "text_scan",
    "untrusted",
    "workers",
]
