"""Every wire message, gathered from the modules of this package into one tagged union.

To add messages, drop a module here (its name must have a range in `base.TAG_RANGES`)
defining `Message` subclasses with explicit int tags; this package imports it, checks that
every tag is unique and inside the module's range, and adds the classes to `ALL_MESSAGES`.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterable, Mapping
from types import ModuleType

from zmesh.protocol.messages.base import (
    RESERVED_TAGS,
    TAG_RANGES,
    Message,
    module_range,
    tag_of,
)

__all__ = [
    "Message",
    "TAG_RANGES",
    "RESERVED_TAGS",
    "ALL_MESSAGES",
    "BY_TAG",
    "all_messages",
    "check_tags",
    "collect",
    "tag_of",
]

# Modules of this package that hold machinery, not messages.
_NOT_MESSAGE_MODULES = frozenset({"base"})


def _message_modules() -> list[ModuleType]:
    importlib.invalidate_caches()  # so a module dropped in after start-up is seen
    modules = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name in _NOT_MESSAGE_MODULES or info.name.startswith("_"):
            continue
        modules.append(importlib.import_module(f"{__name__}.{info.name}"))
    return modules


def _defined_in(module: ModuleType) -> list[type[Message]]:
    return [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, Message)
        and obj is not Message
        and obj.__module__ == module.__name__
    ]


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def check_tags(
    classes_by_module: Mapping[str, Iterable[type[Message]]],
) -> dict[int, type[Message]]:
    """Check the message classes of each module and map tag -> class.

    Raises TypeError naming the class(es) at fault for: a duplicate tag, a tag outside its
    module's range, a non-int tag, a concrete class without a tag, or a class that is not
    array_like or forbids unknown fields. Untagged classes that have subclasses are shared
    bases and are skipped.
    """
    by_tag: dict[int, type[Message]] = {}
    for module_name, classes in classes_by_module.items():
        try:
            allowed = module_range(module_name)
        except LookupError as exc:
            raise TypeError(str(exc)) from None
        for cls in classes:
            try:
                tag = tag_of(cls)
            except TypeError as exc:
                raise TypeError(f"{_name(cls)}: {exc}") from None
            if tag is None:
                if cls.__subclasses__():
                    continue
                raise TypeError(
                    f"{_name(cls)} has no tag; give it an int tag from "
                    f"{allowed.start}-{allowed.stop - 1}: class {cls.__name__}(Message, tag=N)"
                )
            if not cls.__struct_config__.array_like:
                raise TypeError(f"{_name(cls)} must stay array_like like every Message")
            if cls.__struct_config__.forbid_unknown_fields:
                raise TypeError(
                    f"{_name(cls)} must not forbid unknown fields: older peers must be able "
                    "to ignore fields that newer peers append (SCHEMA.md rule 1)"
                )
            if tag not in allowed:
                raise TypeError(
                    f"{_name(cls)} has tag {tag}, outside its module's range "
                    f"{allowed.start}-{allowed.stop - 1} (see zmesh/protocol/SCHEMA.md)"
                )
            other = by_tag.get(tag)
            if other is not None and other is not cls:
                raise TypeError(
                    f"duplicate message tag {tag}: {_name(other)} and {_name(cls)}; "
                    "every message needs its own tag (a subclass inherits its parent's "
                    "tag unless it sets one)"
                )
            by_tag[tag] = cls
    return by_tag


def collect() -> dict[int, type[Message]]:
    """Import every message module of this package and return its checked tag -> class map."""
    return check_tags({m.__name__: _defined_in(m) for m in _message_modules()})


BY_TAG: dict[int, type[Message]] = collect()
ALL_MESSAGES: tuple[type[Message], ...] = tuple(BY_TAG[t] for t in sorted(BY_TAG))


def all_messages(*, rescan: bool = False) -> tuple[type[Message], ...]:
    """The message classes, by tag; `rescan=True` first picks up modules added since import."""
    global BY_TAG, ALL_MESSAGES
    if rescan:
        BY_TAG = collect()
        ALL_MESSAGES = tuple(BY_TAG[t] for t in sorted(BY_TAG))
    return ALL_MESSAGES
