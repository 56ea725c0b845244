"""SageMaker HyperPod (Slurm) node lifecycle scripts: ``on_create.sh``, its steps, and ``precheck.sh``.

The whole folder is uploaded to the lifecycle S3 prefix together with the two generated
input files (``mlcluster_features.json`` and ``provisioning_parameters.json``); see README.md.
``on_create.sh`` is uploaded as :func:`render_on_create` renders it: with the SHA-256 of every
other uploaded file written into it, so a node refuses scripts changed in the bucket.
"""

import hashlib
from collections.abc import Sequence
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


def render_on_create(folder: Path = HYPERPOD_DIR, extra: Sequence[Path] = ()) -> str:
    """``on_create.sh`` of ``folder`` with its manifest line replaced by :func:`manifest` (with ``extra``)."""
    text = (folder / ENTRYPOINT).read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    marks = [i for i, line in enumerate(lines) if line.strip() == MANIFEST_MARK]
    if len(marks) != 1:
        raise ValueError(f"{folder / ENTRYPOINT}: needs exactly one line '{MANIFEST_MARK}', found {len(marks)}")
    lines[marks[0]] = manifest(folder, extra)
    return "".join(lines)
