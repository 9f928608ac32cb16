"""``tokenwatt schema {spec,run,result,comparison}``: print a file kind's JSON Schema."""

from __future__ import annotations

import argparse
import json

from pydantic import BaseModel

from tokenwatt.cli._common import out_console
from tokenwatt.comparison_set import ComparisonSetFile
from tokenwatt.schema.result import ResultFile
from tokenwatt.schema.run import RunFile
from tokenwatt.schema.spec import Spec

__all__ = ["MODELS", "register", "run"]

MODELS: dict[str, type[BaseModel]] = {
    "spec": Spec,
    "run": RunFile,
    "result": ResultFile,
    "comparison": ComparisonSetFile,
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the sub-command."""
    p = sub.add_parser("schema", help="print the JSON Schema of a file kind")
    p.add_argument("kind", choices=sorted(MODELS))
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Print the schema generated from the pydantic model."""
    schema = MODELS[args.kind].model_json_schema()
    out_console().print_json(json.dumps(schema), indent=2, highlight=False)
    return 0
