"""Pulumi entry point: load and validate the stack config, build the stack, export outputs."""

from infra.config import load_config
from infra.stack import build_stack

build_stack(load_config()).export()
