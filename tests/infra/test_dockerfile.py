"""The trainer Dockerfile and .dockerignore: parsed and checked against the pod contract, then
scanned by checkov.

Each rule is a function returning the problems it finds, run on the real Dockerfile (expecting
none) and on small broken Dockerfiles (expecting the rule to fire), so no rule passes vacuously.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infra import image
from trainer import contract

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

Instruction = tuple[str, str]


def parse(text: str) -> list[Instruction]:
    """``(KEYWORD, arguments)`` per instruction: continuations joined, comments dropped."""
    instructions: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # Docker drops comment lines, also inside a continued instruction.
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, rest = (pending + line).partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    return instructions


def args_of(instructions: list[Instruction], keyword: str) -> list[str]:
    return [rest for kw, rest in instructions if kw == keyword]


def arg_defaults(instructions: list[Instruction]) -> dict[str, str]:
    defaults = {}
    for rest in args_of(instructions, "ARG"):
        name, _, value = rest.partition("=")
        defaults[name] = value.strip('"')
    return defaults


# --- Rules: each returns a list of problems (empty: the Dockerfile satisfies the rule). ---


def pinned_base_problems(instructions: list[Instruction]) -> list[str]:
    """Every FROM is ``tensorflow/tensorflow:<x.y.z>`` with the pinned version."""
    froms = args_of(instructions, "FROM")
    if not froms:
        return ["no FROM"]
    problems = []
    for ref in froms:
        ref = ref.split()[0]  # drop "AS <stage>"
        repo, _, tag = ref.rpartition(":")
        if not repo or "/" in tag:
            problems.append(f"FROM {ref}: no tag")
        elif "latest" in tag:
            problems.append(f"FROM {ref}: 'latest' tag")
        elif tag != image.TF_VERSION:
            problems.append(f"FROM {ref}: tag must be {image.TF_VERSION}")
    return problems


def user_problems(instructions: list[Instruction]) -> list[str]:
    """The last USER is numeric ``uid[:gid]`` >= 10000 and comes before ENTRYPOINT."""
    keywords = [kw for kw, _ in instructions]
    if "USER" not in keywords:
        return ["no USER"]
    last_user = len(keywords) - 1 - keywords[::-1].index("USER")
    uid, _, gid = args_of(instructions, "USER")[-1].partition(":")
    problems = []
    if not uid.isdigit() or int(uid) < 10000 or (gid and not gid.isdigit()):
        problems.append(f"USER {uid}{':' + gid if gid else ''}: must be numeric uid >= 10000")
    if "ENTRYPOINT" in keywords and last_user > keywords.index("ENTRYPOINT"):
        problems.append("USER comes after ENTRYPOINT")
    return problems


def remote_add_problems(instructions: list[Instruction]) -> list[str]:
    """No ADD fetches a URL (unpinned, unverified content); COPY is the rule."""
    return [
        f"ADD {rest}"
        for rest in args_of(instructions, "ADD")
        if re.search(r"(^|\s)(https?|git|ssh)://|(^|\s)git@", rest)
    ]


def entrypoint_problems(instructions: list[Instruction]) -> list[str]:
    """Exactly one exec-form ENTRYPOINT equal to ``contract.ENTRYPOINT``, and no CMD."""
    entrypoints = args_of(instructions, "ENTRYPOINT")
    if len(entrypoints) != 1:
        return [f"{len(entrypoints)} ENTRYPOINT instructions, want 1"]
    try:
        value = json.loads(entrypoints[0])
    except ValueError:
        return [f"ENTRYPOINT {entrypoints[0]}: not exec (JSON) form"]
    problems = []
    if value != list(contract.ENTRYPOINT):
        problems.append(f"ENTRYPOINT {value} != contract.ENTRYPOINT {list(contract.ENTRYPOINT)}")
    if args_of(instructions, "CMD"):
        problems.append("CMD present: the StatefulSet's args are the only arguments")
    return problems


def secret_problems(instructions: list[Instruction]) -> list[str]:
    """No ARG or ENV carries a credential (both end up in the image history)."""
    names = [rest.partition("=")[0] for rest in args_of(instructions, "ARG")]
    for rest in args_of(instructions, "ENV"):
        names += re.findall(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_]*)=", rest)
    return [
        f"{name}: looks like a credential"
        for name in names
        if re.search(r"PASSWORD|PASSWD|SECRET|TOKEN|CREDENTIAL|API_KEY|AUTH", name, re.I)
    ]


RULES = {
    "pinned base": pinned_base_problems,
    "non-root user": user_problems,
    "no remote ADD": remote_add_problems,
    "entrypoint": entrypoint_problems,
    "no secrets": secret_problems,
}

GOOD_TAIL = f"USER 10001:10001\nENTRYPOINT {json.dumps(list(contract.ENTRYPOINT))}\n"


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse(DOCKERFILE.read_text())


@pytest.mark.parametrize("rule", sorted(RULES))
def test_dockerfile_satisfies_rule(rule: str, instructions: list[Instruction]) -> None:
    assert RULES[rule](instructions) == [], f"{DOCKERFILE}: rule {rule!r} failed"


@pytest.mark.parametrize(
    ("rule", "dockerfile", "problem"),
    [
        ("pinned base", "FROM tensorflow/tensorflow:latest-gpu\n", "'latest' tag"),
        ("pinned base", "FROM tensorflow/tensorflow\n", "no tag"),
        ("pinned base", "FROM tensorflow/tensorflow:2.20.0\n", "tag must be"),
        ("pinned base", "FROM localhost:5000/tf\n", "no tag"),
        ("non-root user", 'FROM x:1\nENTRYPOINT ["a"]\n', "no USER"),
        ("non-root user", "FROM x:1\nUSER tfd\n", "must be numeric"),
        ("non-root user", "FROM x:1\nUSER 1000\n", "must be numeric uid >= 10000"),
        ("non-root user", "FROM x:1\nUSER 10001\nUSER 0\n", "must be numeric"),
        ("non-root user", 'FROM x:1\nENTRYPOINT ["a"]\nUSER 10001\n', "after ENTRYPOINT"),
        ("no remote ADD", "ADD https://example.com/x.tgz /x\n", "ADD https://"),
        ("no remote ADD", "ADD git@github.com:a/b.git /b\n", "ADD git@"),
        ("entrypoint", "ENTRYPOINT python -m trainer\n", "not exec"),
        ("entrypoint", 'ENTRYPOINT ["python3", "-m", "trainer"]\n', "!= contract"),
        ("entrypoint", 'ENTRYPOINT ["python", "-m", "trainer"]\nCMD ["--x"]\n', "CMD present"),
        ("entrypoint", "FROM x:1\n", "0 ENTRYPOINT"),
        ("no secrets", "ARG REGISTRY_PASSWORD\n", "REGISTRY_PASSWORD"),
        ("no secrets", "ENV A=1 \\\n    GH_TOKEN=abc\n", "GH_TOKEN"),
    ],
)
def test_rule_catches_broken_dockerfile(rule: str, dockerfile: str, problem: str) -> None:
    problems = RULES[rule](parse(dockerfile))
    assert any(problem in p for p in problems), f"rule {rule!r} missed {problem!r}: {problems}"


def test_rules_accept_minimal_good_dockerfile() -> None:
    text = "FROM tensorflow/tensorflow:2.21.0\nARG TF_EXTRA=\n" + GOOD_TAIL
    assert {rule: fn(parse(text)) for rule, fn in RULES.items()} == dict.fromkeys(RULES, [])


def test_one_pinned_base_and_the_gpu_build_adds_tensorflows_cuda_extra(
    instructions: list[Instruction],
) -> None:
    """CPU and GPU builds share the base; the GPU build's argument installs
    ``tensorflow[and-cuda]`` at the base's own TensorFlow version, so the pins cannot drift."""
    assert args_of(instructions, "FROM") == [image.BASE_IMAGE], f"{DOCKERFILE}: FROM"
    assert arg_defaults(instructions)[image.BUILD_ARG_TF_EXTRA] == "", (
        "the default is the CPU build"
    )
    assert dict(image.extra_build_args(True)) == {image.BUILD_ARG_TF_EXTRA: image.TF_EXTRA_GPU}
    assert dict(image.extra_build_args(False)) == {image.BUILD_ARG_TF_EXTRA: ""}
    (run,) = [a for a in args_of(instructions, "RUN") if "pip install" in a]
    assert '"tensorflow[${TF_EXTRA}]==${tf_version}"' in run, f"{DOCKERFILE}: the GPU install"
    assert 'm.version("tensorflow")' in run, f"{DOCKERFILE}: the version comes from the base"


def test_user_matches_image_constants(instructions: list[Instruction]) -> None:
    assert args_of(instructions, "USER")[-1] == f"{image.IMAGE_UID}:{image.IMAGE_GID}"
    run = " ".join(args_of(instructions, "RUN"))
    assert f"--uid {image.IMAGE_UID}" in run and f"--gid {image.IMAGE_GID}" in run, DOCKERFILE


def test_environment_and_ports_follow_contract(instructions: list[Instruction]) -> None:
    env = " ".join(args_of(instructions, "ENV"))
    for setting in ("TF_USE_LEGACY_KERAS=1", "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"):
        assert setting in env, f"{DOCKERFILE}: ENV lacks {setting}"
    exposed = {int(p) for rest in args_of(instructions, "EXPOSE") for p in rest.split()}
    assert exposed == {contract.DEFAULT_GRPC_PORT, contract.DEFAULT_METRICS_PORT}, DOCKERFILE


def test_healthcheck_probes_contract_liveness(instructions: list[Instruction]) -> None:
    (health,) = args_of(instructions, "HEALTHCHECK")
    command = json.loads(health.partition("CMD")[2])
    code = command[-1]
    assert command[:2] == ["python", "-c"], f"{DOCKERFILE}: HEALTHCHECK must use python, no curl"
    for needle in (
        contract.ENV_METRICS_PORT,
        f"'{contract.DEFAULT_METRICS_PORT}'",
        f"'{contract.LIVENESS_PATH}'",
    ):
        assert needle in code, f"{DOCKERFILE}: HEALTHCHECK does not use {needle}"


def test_dependencies_come_from_pinned_requirements(instructions: list[Instruction]) -> None:
    requirements = ROOT / "requirements" / "trainer.txt"
    lines = [ln.strip() for ln in requirements.read_text().splitlines()]
    pins = [ln for ln in lines if ln and not ln.startswith("#")]
    assert pins and all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][\w.]*", p) for p in pins), (
        f"{requirements}: every requirement must be pinned with =="
    )
    copies = args_of(instructions, "COPY")
    assert "requirements/trainer.txt /opt/tfd/requirements.txt" in copies, DOCKERFILE
    run = " ".join(args_of(instructions, "RUN"))
    assert "pip install --no-cache-dir -r /opt/tfd/requirements.txt" in run, DOCKERFILE


# --- .dockerignore ---


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """Docker's pattern syntax: ``**`` spans directories, ``*``/``?`` stay within one."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker semantics: a pattern matches the path or a parent directory; last match wins."""
    parts = path.split("/")
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = _glob_regex(os.path.normpath(pattern.lstrip("!").strip("/")))
        if any(regex.match("/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            result = not negate
    return result


@pytest.fixture(scope="module")
def ignore_patterns() -> list[str]:
    lines = (ln.strip() for ln in DOCKERIGNORE.read_text().splitlines())
    return [ln for ln in lines if ln and not ln.startswith("#")]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".git/HEAD", True),
        (".venv/bin/python", True),
        (".venv-checkov/bin/checkov", True),
        ("tests/infra/test_image.py", True),
        ("Pulumi.yaml", True),
        ("Pulumi.prod.yaml", True),
        ("out/prod/statefulset.yaml", True),
        ("runs/local/chief/checkpoint", True),
        ("trainer/__pycache__/contract.cpython-311.pyc", True),
        ("infra/image.py", True),
        ("requirements/dev.txt", True),
        (".env", True),
        ("trainer/contract/flags.py", False),
        ("trainer/__main__.py", False),
        ("requirements/trainer.txt", False),
    ],
)
def test_dockerignore(path: str, expected: bool, ignore_patterns: list[str]) -> None:
    state = "excluded from" if expected else "kept in"
    assert ignored(path, ignore_patterns) is expected, f"{DOCKERIGNORE}: {path} must be {state}"


def test_everything_copied_is_in_the_context(
    instructions: list[Instruction], ignore_patterns: list[str]
) -> None:
    for rest in args_of(instructions, "COPY"):
        *sources, _dest = rest.split()
        for source in sources:
            assert not source.startswith("--"), f"{DOCKERFILE}: COPY {rest}: no flags expected"
            assert (ROOT / source).exists(), f"{DOCKERFILE}: COPY source {source} missing"
            probe = source.rstrip("/") + ("/contract.py" if source.endswith("/") else "")
            assert not ignored(probe, ignore_patterns), f"{DOCKERIGNORE} excludes {source}"


# --- The image with the user's code (codeDirectory): code-image/Dockerfile. ---


@pytest.fixture(scope="module")
def code_instructions() -> list[Instruction]:
    return parse(image.CODE_DOCKERFILE.read_text())


def test_code_image_builds_on_the_trainer_image_it_is_given(
    code_instructions: list[Instruction],
) -> None:
    path = image.CODE_DOCKERFILE
    assert args_of(code_instructions, "FROM") == [f"${{{image.BUILD_ARG_TRAINER_IMAGE}}}"], path
    declared = [rest.partition("=")[0] for rest in args_of(code_instructions, "ARG")]
    for name in (image.BUILD_ARG_TRAINER_IMAGE, image.BUILD_ARG_TRAINER_IMAGE_ID):
        assert name in declared, f"{path}: no ARG {name} (the stack passes it)"
    # No default: a build without the argument fails instead of using some other base.
    assert f"{image.BUILD_ARG_TRAINER_IMAGE}=" not in " ".join(args_of(code_instructions, "ARG"))


def test_code_image_copies_the_context_read_only_onto_the_path(
    code_instructions: list[Instruction],
) -> None:
    path = image.CODE_DOCKERFILE
    assert args_of(code_instructions, "COPY") == [f". {image.CODE_PATH}/"], (
        f"{path}: the context must be copied whole (its .dockerignore decides), owned by root"
    )
    assert args_of(code_instructions, "RUN") == [], f"{path}: nothing of the user's runs at build"
    (env,) = args_of(code_instructions, "ENV")
    # After the trainer image's own PYTHONPATH: the trainer cannot be shadowed.
    assert env == f'PYTHONPATH="${{PYTHONPATH}}:{image.CODE_PATH}"', f"{path}: ENV {env}"
    assert args_of(code_instructions, "USER") == [f"{image.IMAGE_UID}:{image.IMAGE_GID}"], path
    assert args_of(code_instructions, "ENTRYPOINT") == [], f"{path}: the trainer's entrypoint"


def test_code_image_reads_the_user_directory_dockerignore() -> None:
    """pulumi-docker 5 reads ``<context>/.dockerignore`` only for a Dockerfile named
    ``Dockerfile`` (any other name: ``<context>/<name>.dockerignore``); docker build reads a
    ``<name>.dockerignore`` beside the Dockerfile first. Both must fall back to the user's."""
    assert image.CODE_DOCKERFILE.name == "Dockerfile", image.CODE_DOCKERFILE
    beside = image.CODE_DOCKERFILE.with_name("Dockerfile.dockerignore")
    assert not beside.exists(), f"{beside} would replace the user directory's .dockerignore"


# --- checkov ---


@pytest.mark.parametrize("dockerfile", [DOCKERFILE, image.CODE_DOCKERFILE], ids=["trainer", "code"])
def test_checkov_dockerfile_has_no_failed_checks(
    checkov: str, tmp_path: Path, dockerfile: Path
) -> None:
    result = subprocess.run(
        [
            checkov,
            "--framework",
            "dockerfile",
            "--skip-download",
            "-f",
            str(dockerfile),
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert result.stdout.strip(), (
        f"checkov printed nothing (rc={result.returncode}): {result.stderr[-2000:]}"
    )
    report = json.loads(result.stdout)
    summary = report["summary"]
    failed = [c["check_id"] for c in report["results"]["failed_checks"]]
    assert summary["failed"] == 0 and not failed, f"{dockerfile}: checkov failed {failed}"
    assert summary["parsing_errors"] == 0, f"{dockerfile}: checkov could not parse it"
    assert summary["passed"] > 0, f"{dockerfile}: checkov ran no checks"


# --- The image provides everything the trainer imports. ---

BASE_IMAGE_PACKAGES = frozenset({"tensorflow", "numpy"})
"""Top-level modules the TensorFlow base image ships (numpy is a TensorFlow dependency)."""


def test_trainer_imports_only_what_the_image_installs() -> None:
    requirements = (ROOT / "requirements" / "trainer.txt").read_text().splitlines()
    installed = {
        ln.split("==")[0].strip().lower().replace("-", "_")
        for ln in requirements
        if ln.strip() and not ln.lstrip().startswith("#")
    }
    available = installed | BASE_IMAGE_PACKAGES | set(sys.stdlib_module_names) | {"trainer"}
    missing = {}
    for source in sorted((ROOT / "trainer").rglob("*.py")):
        tree = ast.parse(source.read_text(), filename=str(source))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in available:
                    missing.setdefault(top, []).append(str(source.relative_to(ROOT)))
    assert not missing, f"trainer imports modules the image does not install: {missing}"
