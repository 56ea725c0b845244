"""SageMaker HyperPod (Slurm) node lifecycle scripts: ``on_create.sh``, its steps, and ``precheck.sh``.

The whole folder is uploaded to the lifecycle S3 prefix together with the two generated
input files (``mlcluster_features.json`` and ``provisioning_parameters.json``); see README.md.
``on_create.sh`` is uploaded as :func:`render_on_create` renders it: with the SHA-256 of every
other uploaded file written into it, so a node refuses scripts changed in the bucket.
"""

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path

#: Where `mlcluster patch` keeps mlcluster-backup runs and its marker: ``<prefix><cluster name>/`` of the
#: cluster's patch backup bucket (never the data bucket). Only the controller's execution role may use it.
PATCH_BACKUP_PREFIX = "mlcluster/patch/"

#: The folder to upload as the HyperPod ``LifeCycleConfig.SourceS3Uri`` prefix.
HYPERPOD_DIR = Path(__file__).parent
#: The entrypoint HyperPod runs; it carries the manifest, so it is not listed in it.
ENTRYPOINT = "on_create.sh"
#: The line of ``on_create.sh`` that :func:`render_on_create` replaces with the manifest.
MANIFEST_MARK = "@MLCLUSTER_MANIFEST@"
#: The line of ``on_create.sh`` that :func:`render_on_create` replaces with the generated files' copies.
GENERATED_MARK = "# @MLCLUSTER_GENERATED@"
#: The here-document delimiter of each generated file's copy in ``on_create.sh``.
GENERATED_DELIMITER = "MLCLUSTER_GENERATED"
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


def generated_copies(generated: Mapping[str, str]) -> str:
    """The ``case`` arms of ``on_create.sh``'s ``generated_copy``: each generated file's exact content.

    The generated files hold deploy-time values (CDK tokens), so no digest of them exists at synth
    time; their whole text goes into ``on_create.sh`` instead, as a quoted here-document, and the
    upload fills the same values into both. Each text must end in a newline and hold no line equal
    to the delimiter.
    """
    arms = []
    for name, text in sorted(generated.items()):
        if not text.endswith("\n") or GENERATED_DELIMITER in text.splitlines() or "'" in name or ")" in name:
            raise ValueError(
                f"generated file {name!r}: its text must end in a newline and hold no line '{GENERATED_DELIMITER}'"
            )
        arms.append(f"    {name})\n      cat <<'{GENERATED_DELIMITER}'\n{text}{GENERATED_DELIMITER}\n      ;;\n")
    return "".join(arms)


def render_on_create(
    folder: Path = HYPERPOD_DIR, extra: Sequence[Path] = (), generated: Mapping[str, str] | None = None
) -> str:
    """``on_create.sh`` of ``folder`` with its manifest line replaced by :func:`manifest` (with ``extra``).

    ``generated``: file name -> exact text of the generated files uploaded beside the scripts
    (deploy-time values as tokens); their copies replace the line :data:`GENERATED_MARK`, and the
    node refuses a generated file that differs from its copy. Default: none (every generated file
    is then refused, so a real upload always gives them).
    """
    text = (folder / ENTRYPOINT).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    marks = [i for i, line in enumerate(lines) if line.strip() == MANIFEST_MARK]
    if len(marks) != 1:
        raise ValueError(f"{folder / ENTRYPOINT}: needs exactly one line '{MANIFEST_MARK}', found {len(marks)}")
    lines[marks[0]] = manifest(folder, extra)
    copies = [i for i, line in enumerate(lines) if line.strip() == GENERATED_MARK]
    if generated:
        if len(copies) != 1:
            raise ValueError(f"{folder / ENTRYPOINT}: needs exactly one line '{GENERATED_MARK}', found {len(copies)}")
        lines[copies[0]] = generated_copies(generated)
    return "".join(lines)
