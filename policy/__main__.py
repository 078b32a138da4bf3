"""Entry point the policy SDK runs (``python -m pulumi.policy <engine> policy``)."""

import sys
from pathlib import Path

# The SDK runs this file by path: make its modules importable as the ``policy`` package, the
# same names the unit tests import.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

from policy.pack import PACK_NAME, policies  # noqa: E402

PolicyPack(name=PACK_NAME, enforcement_level=EnforcementLevel.MANDATORY, policies=policies())
