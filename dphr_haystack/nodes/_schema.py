"""Make node ``__init__`` annotations real objects for Haystack's YAML schema generator.

With ``from __future__ import annotations`` every annotation is a string. Haystack 1.x evaluates those
strings in the globals of the *wrapper* it puts around ``__init__`` (``haystack.nodes.base``), where names
such as ``Literal`` do not exist, so the schema cannot be built; and it recognises optional parameters only
as ``typing.Union[..., None]``, not as ``X | None``. :func:`typed_init` evaluates the annotations once, in the
node's own module, and rewrites ``X | None`` as ``typing.Optional[X]``.
"""

from __future__ import annotations

import types
import typing


def typed_init(cls: type) -> type:
    """Class decorator: replace the string annotations of ``cls.__init__`` by the objects they name."""
    init = getattr(cls.__init__, "__wrapped__", cls.__init__)
    hints = typing.get_type_hints(init)
    init.__annotations__ = {
        name: typing.Union[hint.__args__] if isinstance(hint, types.UnionType) else hint  # noqa: UP007
        for name, hint in hints.items()
    }
    return cls
