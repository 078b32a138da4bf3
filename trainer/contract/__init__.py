"""The contract between the Pulumi program and the trainer: every fact both sides use, once.

Neither TensorFlow nor Pulumi is imported here, so the Pulumi program imports this package (and
nothing else of the trainer) and the trainer's pods, its local launcher and its tests read the
same definitions. Split by concern:

- :mod:`~trainer.contract.rules`: the rules both sides apply (run id, worker counts, timeouts,
  modes, names);
- :mod:`~trainer.contract.flags`: the trainer's flags as one typed object (``to_argv`` for the
  container's ``args``, ``from_argv`` for the trainer's command line);
- :mod:`~trainer.contract.env`: the pod environment (variable names, ports, paths, entrypoint);
- :mod:`~trainer.contract.cluster`: the cluster spec and ``TF_CONFIG`` derived from it;
- :mod:`~trainer.contract.api`: the Kubernetes API calls the trainer makes (the Role's rules);
- :mod:`~trainer.contract.metrics`: the Prometheus metric names it exports;
- :mod:`~trainer.contract.events`: the event names of its log lines, which ``tfd`` reads;
- :mod:`~trainer.contract.usage`: command-line mistakes as one line, with the near miss.

Every public name of these modules is also a name of the package (``contract.ENV_POD_NAME``,
``contract.TrainerFlags``), so users need not know the split.
"""

from trainer.contract.api import *  # noqa: F403
from trainer.contract.cluster import *  # noqa: F403
from trainer.contract.env import *  # noqa: F403
from trainer.contract.events import *  # noqa: F403
from trainer.contract.flags import *  # noqa: F403
from trainer.contract.metrics import *  # noqa: F403
from trainer.contract.rules import *  # noqa: F403
from trainer.contract.usage import *  # noqa: F403
