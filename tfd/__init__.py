"""``tfd``: the command for people who train models on a stack of this project.

``submit`` sets a run's settings and deploys them (the Pulumi Automation API, running the
project's own program from its directory, as ``pulumi up`` does), ``status`` says where the run
is, ``logs`` prints every worker's lines, ``stop`` scales the run to zero. The cluster is read
with the user's own access (the stack's kube context and kubeconfig), never the workers'.
See docs/commands.md.
"""
