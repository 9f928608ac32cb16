"""Pydantic models of every tokenwatt file: spec (YAML), run and result (JSON)."""

from tokenwatt.schema.base import SCHEMA_VERSION, StrictModel
from tokenwatt.schema.result import ResultFile
from tokenwatt.schema.run import RunFile
from tokenwatt.schema.spec import Spec

__all__ = ["SCHEMA_VERSION", "ResultFile", "RunFile", "Spec", "StrictModel"]
