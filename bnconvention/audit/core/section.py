"""The base of every part of the census model (:mod:`bnconvention.audit.population.model`) and of the sweep rows the
census is recounted into (:mod:`bnconvention.audit.run.sweeps`): closed, frozen, optional keys left out when absent."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_serializer
from pydantic_core.core_schema import SerializerFunctionWrapHandler


class Section(BaseModel):
    """A part of the census: closed (no unknown keys), frozen. A field that defaults to None is optional: left out
    of the file when absent. A nullable field without a default is written as null."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    optional: ClassVar[frozenset[str]] = frozenset()  # derived from the fields (below), never declared
    # an optional key written as null while the key it goes with is present (no twins in a population with families,
    # no retrain reference beside a probe that ran)
    null_beside: ClassVar[dict[str, str]] = {}

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls.optional = frozenset(name for name, field in cls.model_fields.items()
                                 if not field.is_required() and field.default is None)

    @model_serializer(mode="wrap")
    def _leave_out_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {key: value for key, value in data.items()
                if not (key in self.optional and value is None and data.get(self.null_beside.get(key, "")) is None)}


__all__ = ["Section"]
