"""SageMaker HyperPod (Slurm) node lifecycle scripts: ``on_create.sh``, its steps, and ``precheck.sh``.

The whole folder is uploaded to the lifecycle S3 prefix together with the two generated
input files (``mlcluster_features.json`` and ``provisioning_parameters.json``); see README.md.
``on_create.sh`` is uploaded as :func:`render_on_create` renders it: with the SHA-256 of every
other uploaded file written into it, so a node refuses scripts changed in the bucket.
"""

import base64
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

#: Where `mlcluster patch` keeps mlcluster-backup runs and its marker: ``<prefix><cluster name>/`` of the
#: cluster's patch backup bucket (never the data bucket). Only the controller's execution role may use it.
PATCH_BACKUP_PREFIX = "mlcluster/patch/"
#: The folder of that prefix holding the controller's daily copies (``scheduled/<weekday>/``, seven rotating).
SCHEDULED_BACKUP_FOLDER = "scheduled/"

#: The folder to upload as the HyperPod ``LifeCycleConfig.SourceS3Uri`` prefix.
HYPERPOD_DIR = Path(__file__).parent
#: The Amazon RDS root CAs slurmdbd verifies a remote RDS/Aurora accounting database against (uploaded with
#: the scripts, checked by on_create.sh's manifest, installed by the accounting step), and its pinned SHA-256.
RDS_CA_ROOTS = "rds-ca-roots.pem"
RDS_CA_ROOTS_SHA256 = "27904d6ae42e1442c74d10d32a9a85d73d7bc87f53cc735d75199b0f60c5d216"
#: The entrypoint HyperPod runs; it carries the manifest, so it is not listed in it.
ENTRYPOINT = "on_create.sh"
#: The line of ``on_create.sh`` that :func:`render_on_create` replaces with the manifest.
MANIFEST_MARK = "@MLCLUSTER_MANIFEST@"
#: The line of ``on_create.sh`` that :func:`render_on_create` replaces with the generated files' copies
#: (in the data section after the script's last command, which bash never reads as commands).
GENERATED_MARK = "# @MLCLUSTER_GENERATED@"
#: The names a generated file may have (``on_create.sh`` checks the same shape).
GENERATED_NAME = re.compile(r"[a-z_]+\.(json|yml)")


def base64_text(text: str) -> str:
    """``text`` (UTF-8) in base64: how a generated file's copy is written into ``on_create.sh``."""
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


#: What is never uploaded (Python caches).
NOT_UPLOADED = ("__pycache__", "*.pyc")


def uploaded_files(folder: Path = HYPERPOD_DIR) -> list[Path]:
    """Every file of ``folder`` that is uploaded besides the entrypoint, relative and sorted."""
    files = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if not path.is_file() or relative.as_posix() == ENTRYPOINT:
            continue
        if "__pycache__" in relative.parts or path.suffix == ".pyc":
            continue
        files.append(relative)
    return files


def manifest(folder: Path = HYPERPOD_DIR, extra: Sequence[Path] = ()) -> str:
    """``<sha256>  <relative path>`` for every uploaded file but the entrypoint (``sha256sum`` format).

    ``extra``: files uploaded from elsewhere to the top of the prefix (the collector's scripts).
    """
    entries = [(folder / relative, relative.as_posix()) for relative in uploaded_files(folder)]
    entries += [(path, path.name) for path in extra]
    return "".join(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {name}\n" for path, name in entries)


def generated_copies(generated: Mapping[str, str], encode: Callable[[str], str] = base64_text) -> str:
    """The data-section lines of ``on_create.sh``: ``NAME BASE64`` per generated file, sorted by name.

    The generated files hold deploy-time values (CDK tokens), so no digest of them exists at synth
    time; a copy of each goes into ``on_create.sh`` instead, base64-encoded by ``encode`` (for a text
    with tokens, CloudFormation's ``Fn::Base64`` of the same values the upload fills in), after the
    script's last command: a value is never shell text there, and the node refuses a line of any
    other shape. Each text must end in a newline.
    """
    lines = []
    for name, text in sorted(generated.items()):
        if not text.endswith("\n") or GENERATED_NAME.fullmatch(name) is None:
            raise ValueError(
                f"generated file {name!r}: allowed: a name of a-z and _ ending .json or .yml, "
                "a text ending in a newline"
            )
        lines.append(f"{name} {encode(text)}\n")
    return "".join(lines)


def render_on_create(
    folder: Path = HYPERPOD_DIR,
    extra: Sequence[Path] = (),
    generated: Mapping[str, str] | None = None,
    encode: Callable[[str], str] = base64_text,
) -> str:
    """``on_create.sh`` of ``folder`` with its manifest line replaced by :func:`manifest` (with ``extra``).

    ``generated``: file name -> exact text of the generated files uploaded beside the scripts
    (deploy-time values as tokens); their copies replace the line :data:`GENERATED_MARK`, and the
    node refuses a generated file that differs from its copy. Default: none (every generated file
    is then refused, so a real upload always gives them). ``encode``: see :func:`generated_copies`.
    """
    text = (folder / ENTRYPOINT).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    marks = [i for i, line in enumerate(lines) if line.strip() == MANIFEST_MARK]
    if len(marks) != 1:
        raise ValueError(f"{folder / ENTRYPOINT}: needs exactly one line '{MANIFEST_MARK}', found {len(marks)}")
    lines[marks[0]] = manifest(folder, extra)
    copies = [i for i, line in enumerate(lines) if line.strip() == GENERATED_MARK]
    if generated and len(copies) != 1:
        raise ValueError(f"{folder / ENTRYPOINT}: needs exactly one line '{GENERATED_MARK}', found {len(copies)}")
    for i in copies:
        lines[i] = generated_copies(generated or {}, encode)
    return "".join(lines)
