"""Every download in every node script (ParallelCluster and HyperPod) is pinned and verified.

A static walk over the shell scripts of ``mlcluster/lifecycle/pcluster`` and
``mlcluster/lifecycle/hyperpod``. What counts as pinned:

- ``curl``/``wget`` (and ``git clone``) run inside a function that verifies what it got
  (``sha256sum``; ``gpg --show-keys`` for repository keys; ``git rev-parse`` for clones),
  and every call of that function (or of the helpers that lead to it) passes a pinned
  value: a SHA-256 (64 hex), a key fingerprint or commit (40 hex), literally or through a
  variable assigned such a literal anywhere in the same tree. A download outside any
  such function fails.
- Container images by digest: every ``*IMAGE=`` assignment and every ``docker``/``podman``
  pull or run and ``enroot import`` names an ``@sha256:<64 hex>`` reference.
- Repository keys by fingerprint: no ``apt-key``, no ``rpm --import`` or ``gpgkey=`` of a
  URL (the package manager would trust whatever it fetched); a script that points a
  repository at a local key (``signed-by=``, ``gpgkey=file://``) also passes a pinned
  fingerprint.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mlcluster.lifecycle.collector import COLLECTOR_DIR
from mlcluster.lifecycle.hyperpod import HYPERPOD_DIR
from mlcluster.lifecycle.pcluster import PCLUSTER_DIR

SHA256 = re.compile(r"\b[0-9a-fA-F]{64}\b")
ID40 = re.compile(r"\b[0-9a-fA-F]{40}\b")
FINGERPRINT = re.compile(r"\b[0-9A-F]{40}\b")
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}\b")
DOWNLOAD = re.compile(r"(?<![\w-])(curl|wget)\s+-")
CLONE = re.compile(r"\bgit\s+clone\b")
IMAGE_USE = re.compile(r"\b(docker|podman)\s+(pull|run)\b|\benroot\s+import\b")
IMAGE_VAR = re.compile(r"^\s*(?:readonly\s+|local\s+|export\s+)?(\w*IMAGE)=(\S*)")
ASSIGN = re.compile(r"^\s*(?:readonly\s+|local\s+|export\s+|declare\s+-\w+\s+)?(\w+)=[\"']?([^\"'\s]*)")
VAR_REF = re.compile(r"\$\{?(\w+)\}?")
FUNCTION = re.compile(r"^(\w+)\s*\(\)\s*\{")
FUNCTION_CALL = re.compile(r"(?:^\s*|[;&|(]\s*|\$\()(\w+)")
VERIFIES = {"download": re.compile(r"sha256sum|--show-keys"), "clone": re.compile(r"rev-parse")}
#: The EC2 instance metadata service (IMDSv2). A curl whose every URL is ``${VAR}/...`` with VAR
#: assigned only this address reads the instance's own metadata, not software: no pin applies.
IMDS_URL = "http://169.254.169.254/latest"
#: curl options that take a value (the value is not a URL).
CURL_VALUE_OPTIONS = {"-o", "-H", "-X", "--connect-timeout"}


@dataclass
class Line:
    file: Path
    number: int
    text: str
    function: str | None


@dataclass
class Tree:
    """The logical lines (continuations joined, comments dropped) of one node-script tree."""

    lines: list[Line] = field(default_factory=list)
    values: dict[str, set[str]] = field(default_factory=dict)
    #: The files that define each function. A name defined in several files (``main``) is
    #: local to each of them; a name defined once (a ``lib.sh`` helper) serves every file.
    defined: dict[str, set[Path]] = field(default_factory=dict)

    @classmethod
    def load(cls, files: dict[Path, str]) -> Tree:
        tree = cls()
        for path, text in files.items():
            function: str | None = None
            pending = ""
            start = 0
            for number, raw in enumerate(text.splitlines(), start=1):
                if not pending:
                    start = number
                if raw.lstrip().startswith("#") and not pending:
                    continue
                if raw.endswith("\\"):
                    pending += raw[:-1] + " "
                    continue
                logical = pending + raw
                pending = ""
                match = FUNCTION.match(logical)
                if match:
                    function = match.group(1)
                    tree.defined.setdefault(function, set()).add(path)
                elif logical == "}":
                    function = None
                tree.lines.append(Line(path, start, logical, function))
                assigned = ASSIGN.match(logical)
                if assigned:
                    tree.values.setdefault(assigned.group(1), set()).add(assigned.group(2))
                for item in re.findall(r"^\s+(\S+=\S+)$", logical):  # array items: name=value
                    tree.values.setdefault("_items", set()).add(item)
        return tree

    def resolve(self, text: str) -> str:
        """``text`` with each ``$VAR`` replaced by every literal assigned to VAR in the tree."""
        values = [text]
        for name in VAR_REF.findall(text):
            values += sorted(self.values.get(name, ()))
        return " ".join(values)

    def pinned(self, text: str, kind: str) -> bool:
        resolved = self.resolve(text)
        if kind == "clone":
            return bool(ID40.search(resolved))
        return bool(SHA256.search(resolved) or FINGERPRINT.search(resolved))

    def local(self, function: str, file: Path) -> bool:
        """``function`` as seen from ``file`` is that file's own definition."""
        return file in self.defined.get(function, set())

    def body(self, function: str, file: Path) -> list[Line]:
        """The lines of the ``function`` that ``file`` runs: its own definition, else the shared one."""
        own = self.local(function, file)
        return [line for line in self.lines if line.function == function and (line.file == file or not own)]

    def callers(self, function: str, file: Path) -> list[Line]:
        """Lines that run ``function`` as a command (not its definition, not a variable of that name)."""
        call = re.compile(
            r'(?:^|[;&|(!]\s*|\b(?:then|if|do|else)\s+|\bretry(?:\s+\d+\s+"[^"]*")?\s+)'
            rf"{re.escape(function)}(?:\s|$)"
        )
        shared = len(self.defined.get(function, set())) <= 1
        return [
            line
            for line in self.lines
            if call.search(line.text.strip())
            and not FUNCTION.match(line.text)
            and (shared or line.file == file or not self.local(function, line.file))
        ]

    def verifies(self, function: str, kind: str, file: Path, depth: int = 0) -> bool:
        """``function`` (as ``file`` runs it) checks what it fetched, itself or through a function it runs."""
        body = self.body(function, file)
        if any(VERIFIES[kind].search(line.text) for line in body):
            return True
        helpers = {match.group(1) for line in body for match in FUNCTION_CALL.finditer(line.text)}
        return depth < 3 and any(
            self.verifies(name, kind, file, depth + 1) for name in helpers & self.functions() if name != function
        )

    def functions(self) -> set[str]:
        return {line.function for line in self.lines if line.function is not None}

    def site_ok(self, line: Line, kind: str, verified: bool = False, depth: int = 0) -> bool:
        """A download or clone site is pinned: a function on the way in verifies, and every way in carries a pin."""
        if depth > 4:
            return False
        if line.function is None:  # top level: verified and pinned right there in the script
            top = [other for other in self.lines if other.file == line.file and other.function is None]
            return any(VERIFIES[kind].search(o.text) for o in top) and any(self.pinned(o.text, kind) for o in top)
        own = self.body(line.function, line.file)
        if self.verifies(line.function, kind, line.file) and any(self.pinned(o.text, kind) for o in own):
            return True  # checked inline against a pin
        verified = verified or self.verifies(line.function, kind, line.file)
        callers = [call for call in self.callers(line.function, line.file) if call.function != line.function]
        if not callers:
            return False
        for call in callers:
            if verified and self.pinned(call.text, kind):
                continue
            if self.site_ok(call, kind, verified, depth + 1):
                continue
            return False
        return True


def imds_read(tree: Tree, text: str) -> bool:
    """``text`` is a single curl whose every URL is under IMDS_URL (through a variable holding only it)."""
    text = re.sub(r"\s*\|\|\s*return\s+\d+$", "", text)  # the caller's retry sees the failure
    try:
        words = shlex.split(text)
    except ValueError:
        return False
    if words[:1] != ["curl"] or any(w in ("|", ";", "&&", "||") for w in words):
        return False
    urls, skip = [], False
    for word in words[1:]:
        if skip:
            skip = False
        elif word in CURL_VALUE_OPTIONS:
            skip = True
        elif not word.startswith("-"):
            urls.append(word)
    names = [re.fullmatch(r"\$\{(\w+)\}/\S*", url) for url in urls]
    return bool(urls) and all(m is not None and tree.values.get(m[1]) == {IMDS_URL} for m in names)


def violations(tree: Tree, path: Path) -> list[str]:
    """Everything in ``path`` that downloads, pulls or trusts without a pin."""
    found = []
    lines = [line for line in tree.lines if line.file == path]
    for line in lines:
        where = f"{path.name}:{line.number}"
        text = line.text
        if DOWNLOAD.search(text) and not tree.site_ok(line, "download") and not imds_read(tree, text.strip()):
            found.append(f"{where}: download without a pinned SHA-256/fingerprint check: {text.strip()}")
        if CLONE.search(text) and not tree.site_ok(line, "clone"):
            found.append(f"{where}: git clone without a pinned commit check: {text.strip()}")
        image = IMAGE_VAR.match(text)
        if image and not DIGEST.search(image.group(2)):
            found.append(f"{where}: image {image.group(2)} is not pinned by digest (@sha256:...)")
        if IMAGE_USE.search(text) and not DIGEST.search(tree.resolve(text)):
            found.append(f"{where}: image used without a digest: {text.strip()}")
        if re.search(r"\bapt-key\b|rpm\s+--import\s+\S*https?://|gpgkey\s*=\s*https?://", text):
            found.append(f"{where}: repository key trusted as downloaded: {text.strip()}")
    if any(re.search(r"signed-by=|gpgkey=file://", line.text) for line in lines):
        keys_pinned = any(
            FINGERPRINT.search(tree.resolve(line.text)) for line in lines if line.function is None or "key" in line.text
        )
        if not keys_pinned:
            found.append(f"{path.name}: a repository key is used but no pinned fingerprint is passed in this script")
    return found


def load(folder: Path) -> Tree:
    return Tree.load({path: path.read_text() for path in sorted(folder.rglob("*.sh"))})


TREES = {
    "pcluster": (PCLUSTER_DIR, load(PCLUSTER_DIR)),
    "hyperpod": (HYPERPOD_DIR, load(HYPERPOD_DIR)),
    # The metrics collector's installer, shipped next to both backends' scripts.
    "collector": (COLLECTOR_DIR, load(COLLECTOR_DIR)),
}


def cases() -> list[object]:
    return [
        pytest.param(name, path, id=f"{name}/{path.relative_to(folder)}")
        for name, (folder, _) in TREES.items()
        for path in sorted(folder.rglob("*.sh"))
    ]


@pytest.mark.parametrize(("tree", "path"), cases())
def test_every_download_is_pinned(tree: str, path: Path) -> None:
    assert violations(TREES[tree][1], path) == []


def test_the_walk_sees_the_downloads_it_must_check() -> None:
    tree = TREES["pcluster"][1]
    sites = [
        line
        for line in tree.lines
        if (DOWNLOAD.search(line.text) and not imds_read(tree, line.text.strip())) or CLONE.search(line.text)
    ]
    assert {line.function for line in sites} == {"download", "clone_fresh"}
    lib = PCLUSTER_DIR / "lib.sh"
    calls = {line.function for line in tree.callers("download", lib)}
    assert calls == {"fetch_verified", "fetch_key"}
    # aws-ofi-nccl, nccl-tests, the node exporter and the prometheus_client wheel (exporters.sh).
    assert len(tree.callers("fetch_verified", lib)) == 4 and len(tree.callers("fetch_key", lib)) >= 5


def test_the_walk_sees_the_collectors_download() -> None:
    tree = TREES["collector"][1]
    sites = [line for line in tree.lines if DOWNLOAD.search(line.text)]
    assert {line.function for line in sites} == {"fetch_verified"}
    calls = tree.callers("fetch_verified", COLLECTOR_DIR / "collector_install.sh")
    assert len(calls) == 2 and all(tree.pinned(call.text, "download") for call in calls)


def test_a_function_name_in_two_files_does_not_borrow_the_other_files_check(tmp_path: Path) -> None:
    """Each step script has its own ``main``: one that verifies must not vouch for another that does not."""
    checked = tmp_path / "checked.sh"
    checked.write_text(
        'get() {\n  curl -fsSL -o /f "$1"\n  echo "$2  /f" | sha256sum -c\n}\n'
        "main() {\n  get https://x/a " + "a" * 64 + "\n}\nmain\n"
    )
    unchecked = tmp_path / "unchecked.sh"
    unchecked.write_text('install_x() {\n  curl -fsSL -o /x "https://x/b"\n}\nmain() {\n  install_x\n}\nmain\n')
    tree = Tree.load({checked: checked.read_text(), unchecked: unchecked.read_text()})
    assert violations(tree, checked) == []
    (found,) = violations(tree, unchecked)
    assert "unchecked.sh:2: download without a pinned SHA-256" in found


# ---------------------------------------------------------------- the checker itself

PINS = "GOOD_SHA=" + "a" * 64 + "\nKEY_FPR=" + "B" * 40 + "\nCOMMIT=" + "c" * 40 + "\n"
HELPERS = """get() {
  curl -fsSL -o "$3" "$1"
  [[ "$(sha256sum "$3" | cut -d' ' -f1)" == "$2" ]] || exit 1
}
"""


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("curl -fsSL -o /x https://example.com/x\n", "download without a pinned"),
        (HELPERS + 'get https://example.com/x "$UNPINNED" /x\n', "download without a pinned"),
        ("wget -q https://example.com/x\nsha256sum /x\n", "download without a pinned"),
        ('f() {\n  curl -fsSL -o /x "$1"\n  sha256sum /x\n}\nf https://e/x\n', "download without a pinned"),
        ("git clone --depth 1 https://example.com/r.git /r\n", "git clone without a pinned commit"),
        ("DCGM_IMAGE=nvcr.io/nvidia/dcgm-exporter:3.3.5\n", "is not pinned by digest"),
        ("docker run --rm nvcr.io/nvidia/cuda:12.4\n", "image used without a digest"),
        ("curl -fsSL https://k/key | apt-key add -\n", "repository key trusted as downloaded"),
        ("cat >/etc/yum.repos.d/x.repo <<EOF\ngpgkey=https://k/key\nEOF\n", "repository key trusted as downloaded"),
        ('echo "deb [signed-by=/k.gpg] https://r stable main" >/l\n', "no pinned fingerprint"),
    ],
)
def test_the_checker_catches(tmp_path: Path, script: str, message: str) -> None:
    (tmp_path / "pins.sh").write_text(PINS)
    (tmp_path / "step.sh").write_text(script)
    tree = load(tmp_path)
    found = violations(tree, tmp_path / "step.sh")
    assert any(message in item for item in found), found


@pytest.mark.parametrize(
    "script",
    [
        HELPERS + 'get https://example.com/x "${GOOD_SHA}" /x\n',
        HELPERS + 'wrap() {\n  get "$1" "$2" /x\n}\nwrap https://example.com/x "$GOOD_SHA"\n',
        'clone() {\n  git clone --branch v1 https://e/r.git /r\n  [[ "$(git -C /r rev-parse HEAD)" == "$1" ]]\n}\n'
        'clone "$COMMIT"\n',
        "IMAGE=nvcr.io/nvidia/dcgm@sha256:" + "d" * 64 + '\ndocker pull "$IMAGE"\n',
        'fetch_key() {\n  curl -fsS -o /k "$1"\n  gpg --show-keys /k\n}\nfetch_key https://k "$KEY_FPR"\n'
        'echo "deb [signed-by=/k.gpg] https://r stable main" >/l\n',
        "apt_install ca-certificates curl\n",
        'install_x() {\n  curl -fsSL -o /x https://e/x\n  echo "$GOOD_SHA  /x" | sha256sum -c -\n}\n'
        "main() {\n  install_x\n}\nmain\n",
        'curl -fsSL -o /x https://e/x\necho "' + "e" * 64 + '  /x" | sha256sum -c -\n',
    ],
)
def test_the_checker_accepts_pinned_forms(tmp_path: Path, script: str) -> None:
    (tmp_path / "pins.sh").write_text(PINS)
    (tmp_path / "step.sh").write_text(script)
    assert violations(load(tmp_path), tmp_path / "step.sh") == []


def test_only_a_curl_to_the_metadata_service_is_an_imds_read() -> None:
    """health_check.sh's two IMDS calls pass; the same curl with any other URL beside them does not."""
    tree = TREES["pcluster"][1]
    reads = [line for line in tree.lines if line.function == "imds_get" and DOWNLOAD.search(line.text)]
    assert len(reads) == 2 and all(imds_read(tree, line.text.strip()) for line in reads)
    for text in (
        'curl -fsS -o "$2" "${IMDS}/$1" "$url"',
        'curl -fsS -o "$2" https://example.com/x.tar.gz',
        'curl -fsS -o "$2" "${WORK_DIR}/x"',
        'curl -fsS "${IMDS}/x" | bash',
    ):
        assert not imds_read(tree, text), text
