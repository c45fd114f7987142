"""Writing a run to disk: records as CSV, the resolved scenario, seed and version.

Every output folder (a run, a sweep, a plan, the claims, a grid) is written atomically
(``staged_folder``): into a sibling temporary folder that replaces ``--out`` only once
everything is written, so an interrupted or failed run leaves nothing, and two runs never
mix their files. An ``--out`` that exists and is not empty is refused unless ``--force``,
and ``--force`` replaces only a folder SpecSim itself wrote: one whose marker file
(:data:`MARKER`, the list of every file SpecSim put there) is there and lists everything the
folder holds. A folder with anything else in it -- a file added by hand, a ``.git``, a
checkout, a home folder -- is refused whatever the flag, with the first thing that is not
SpecSim's named, and so is a folder that holds the working directory.

Layout of a run folder::

    scenario.yaml            the fully resolved scenario (every default filled in)
    meta.yaml                seed, package version, source file, overrides, wall time,
                             complete: true (before the report, which names them; the
                             staged folder is put in place whole, or not at all)
    summary.json             the summaries ``specsim run --json`` prints
    <variant>/requests.csv   one row per request record (``sim.records``)
    <variant>/iterations.csv one row per iteration record
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

import yaml

from specdec.errors import UserError


def package_version() -> str:
    """The installed specdec-sim version ("unknown" when running from a bare checkout)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specdec-sim")
    except PackageNotFoundError:
        return "unknown"


def default_run_dir(name: str, root: str | Path = "runs") -> Path:
    """``runs/<name>-<UTC timestamp>``, with ``-2``, ``-3``... if that folder exists."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base = Path(root) / f"{name}-{stamp}"
    path, k = base, 1
    while path.exists():
        k += 1
        path = base.with_name(f"{base.name}-{k}")
    return path


def make_dir(path: str | Path, flag: str) -> Path:
    """Create the folder ``path`` (and its parents) or raise a one-line UserError naming
    ``flag`` and the path: an existing file there, or a place that cannot be written."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UserError(f"{flag} {out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{flag} {out}: cannot create the folder: {e.strerror}") from None
    return out


MARKER = ".specsim-output"  # in every folder SpecSim writes: what it wrote there


def check_out(out: Path, flag: str = "--out", force: bool = False) -> Path:
    """Refuse an output folder before any work is done: a file there, or a folder that is
    not empty (unless ``force``, and then only a folder SpecSim wrote, see the module
    notes)."""
    out = Path(out)
    _check_name_lengths(out, flag)
    if out.exists() and not out.is_dir():
        raise UserError(f"{flag} {out}: exists and is not a folder")
    if out.is_dir() and _holds_cwd(out):
        raise UserError(f"{flag} {out}: holds the working directory; SpecSim writes a "
                        f"folder of its own: give another one")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise UserError(f"{flag} {out}: exists and is not empty; give --force to replace "
                            "it (a folder SpecSim wrote), or another folder")
        _check_replaceable(out, flag)
    return out


NAME_MAX = 255  # bytes in one file or folder name (Linux, macOS, Windows' NTFS in UTF-16)
# the folder is staged beside itself as .<name>.partial-<pid> (staged_folder): room for that
STAGING_BYTES = len(".") + len(".partial-") + 7  # pids have at most 7 digits (Linux: 2**22)


def _check_name_lengths(out: Path, flag: str) -> None:
    """Refuse a path with a component the file system cannot name (over ``NAME_MAX`` bytes,
    the last one with room for its staging name): checked before anything looks at it, as
    the operating system's own refusal (ENAMETOOLONG) is an OSError from ``exists()``."""
    parts = out.parts
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        most = NAME_MAX - (STAGING_BYTES if last else 0)
        size = len(os.fsencode(part))
        if size > most:
            room = f" ({NAME_MAX} less room for the staging folder's name)" if last else ""
            raise UserError(f"{flag} {out}: the name {part[:24]}... is {size} bytes; a folder "
                            f"name may have at most {most}{room}")


def _check_replaceable(out: Path, flag: str) -> None:
    """Refuse (UserError) to replace ``out`` unless SpecSim wrote all of it: it is no link
    and its marker lists every file and folder in it (``check_out`` has refused a folder
    that holds the working directory before any work)."""
    if out.is_symlink():
        raise UserError(f"{flag} {out}: is a link; --force replaces only a folder SpecSim "
                        f"wrote, not what a link points to")
    _check_marked(out, out, flag)


def _holds_cwd(out: Path) -> bool:
    """Whether the folder ``out`` is the working directory or one of its parents."""
    try:
        here = Path.cwd().resolve()
    except OSError:  # the working directory was removed: it is in no folder
        return False
    where = out.resolve()
    return here == where or where in here.parents


def _check_marked(folder: Path, out: Path, flag: str) -> None:
    """Refuse (UserError naming ``out``) unless ``folder``'s marker lists all it holds."""
    listed = _written(folder)
    if listed is None:
        raise UserError(f"{flag} {out}: not a folder SpecSim wrote (no {MARKER} file in "
                        f"it); --force replaces only those; give another folder or empty "
                        f"this one yourself")
    for path in sorted(_contents(folder)):
        if path not in listed:
            raise UserError(f"{flag} {out}: holds {path!r}, which SpecSim did not write "
                            f"there; --force replaces only a folder SpecSim wrote whole; "
                            f"move it, or give another folder")


def _contents(folder: Path) -> set[str]:
    """Every file and folder under ``folder`` (links not followed), as relative POSIX
    paths, the marker itself left out."""
    found = set()
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        for name in dirs + files:
            found.add((rel / name).as_posix())
    found.discard(MARKER)
    return found


def _written(folder: Path) -> set[str] | None:
    """The paths the marker of ``folder`` lists; None where it has no readable marker."""
    marker = folder / MARKER
    try:
        if marker.is_symlink() or not marker.is_file():
            return None
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("written_by") != "specsim" \
            or not isinstance(data.get("paths"), list):
        return None
    return {p for p in data["paths"] if isinstance(p, str)}


def _mark(folder: Path) -> None:
    """Write the marker: SpecSim wrote ``folder``, and these are its paths."""
    paths = sorted(_contents(folder))
    (folder / MARKER).write_text(json.dumps(
        {"written_by": "specsim", "version": package_version(), "paths": paths}, indent=1))


@contextmanager
def staged_folder(out: str | Path, flag: str = "--out", force: bool = False):
    """Write a folder atomically: yields a fresh sibling temporary folder, which replaces
    ``out`` when the block ends; on any error or interrupt it is removed instead, so ``out``
    is untouched (absent, or as it was) or complete."""
    out = check_out(Path(out), flag, force)
    made = [p for p in (out.parent, *out.parent.parents) if not p.exists()]  # deepest first
    make_dir(out.parent, flag)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        try:
            tmp.mkdir()
        except OSError as e:
            raise UserError(f"{flag} {out}: cannot create the folder: {e.strerror}") from None
        yield tmp
        _mark(tmp)
        _commit(tmp, out, flag, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for parent in made:  # and the folders made to hold it (runs/ by default)
            try:
                parent.rmdir()
            except OSError:  # no longer empty: something else writes there now
                break
        raise


def _commit(tmp: Path, out: Path, flag: str, force: bool) -> None:
    """Put ``tmp`` in ``out``'s place (an empty ``out`` goes, or with ``force`` one that
    SpecSim wrote). ``out`` is checked now, moved aside, and checked again where it was
    moved to (it may change while this run worked, or between the two), and put back
    untouched when it no longer passes."""
    old = None
    if out.exists():
        if any(out.iterdir()):
            if not force:
                raise UserError(f"{flag} {out}: another run wrote it meanwhile; this run's "
                                "files were discarded")
            _check_replaceable(out, flag)
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        try:
            out.rename(old)
        except OSError as e:
            raise UserError(f"{flag} {out}: cannot move it aside to replace it: "
                            f"{e.strerror}") from None
        try:
            if any(old.iterdir()):
                if not force:
                    raise UserError(f"{flag} {out}: another run wrote it meanwhile; this "
                                    "run's files were discarded")
                _check_marked(old, out, flag)
        except BaseException:
            old.rename(out)  # as it was
            raise
    try:
        tmp.rename(out)
    except OSError as e:
        if old is not None:
            old.rename(out)
        raise UserError(f"{flag} {out}: cannot put the finished folder there: "
                        f"{e.strerror}") from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def rebased(paths, tmp: Path, out: Path) -> list[Path]:
    """``paths`` written under the staged ``tmp`` as they will be under ``out``."""
    return [out / Path(p).relative_to(tmp) for p in paths]


def write_records(path: Path, records) -> None:
    """``sim.records.Records`` as CSV with a header row (plain ``csv``; pandas belongs to
    reports/): whole columns go to Python scalars at once, then rows to the writer."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(records.columns)
        w.writerows(records.rows())


def write_run(result, out_dir: str | Path, source: str, overrides: list[str],
              wall_s: float, force: bool = False, then=None) -> Path:
    """Write ``result`` (a ``ScenarioResult``) as the folder ``out_dir``, atomically; returns
    it. ``then(folder)``, if given, adds to the folder before it is put in place (the run
    report), so a report that fails or is interrupted leaves no folder either."""
    out = Path(out_dir)
    with staged_folder(out, "--out", force) as tmp:
        for v in result.variants:
            write_variant(tmp, v, out)
        finish_run(result, tmp, out, source, overrides, wall_s, then)
    return out


@contextmanager
def writing(out: Path):
    """An OSError while writing the run folder ``out`` as a one-line UserError."""
    try:
        yield
    except OSError as e:
        raise UserError(f"--out {out}: cannot write {e.filename or 'the run'}: "
                        f"{e.strerror}") from None


def write_variant(tmp: Path, variant, out: Path) -> None:
    """A variant's records, ``<variant>/requests.csv`` and ``iterations.csv`` (and a P/D
    run's ``transfers.csv`` and ``prefill-iterations.csv``, a run with a CPU tier's
    ``loads.csv`` and ``offload-tiers.csv``), into the staged folder ``tmp``
    of ``out`` (``sim.runner.run`` writes each where it was simulated, while the others
    still run)."""
    with writing(out):
        d = tmp / variant.name
        d.mkdir(exist_ok=True)
        write_records(d / "requests.csv", variant.requests)
        write_records(d / "iterations.csv", variant.iterations)
        if variant.transfers is not None:  # a P/D run (sim.disagg)
            write_records(d / "transfers.csv", variant.transfers)
            write_records(d / "prefill-iterations.csv", variant.prefill_iteration_rows)
        if variant.tiers is not None:  # a CPU tier below the prefix cache (sim.offload)
            write_records(d / "loads.csv", variant.loads)
            write_records(d / "offload-tiers.csv", variant.tiers)


def finish_run(result, tmp: Path, out: Path, source: str, overrides: list[str],
               wall_s: float, then=None) -> None:
    """Everything of a run folder but its records (already in the staged ``tmp``): the
    resolved scenario, the summaries, meta.yaml, then ``then(tmp)`` (the report, whose
    header names meta's source, version and overrides: written before it, they read
    ``?``). The folder is staged, so none of it is in place before all of it is."""
    with writing(out):
        sc = result.scenario
        (tmp / "scenario.yaml").write_text(
            yaml.safe_dump(sc.model_dump(mode="json"), sort_keys=False)
        )
        (tmp / "summary.json").write_text(json.dumps({"variants": result.summaries},
                                                     indent=2))
        _write_meta(result, tmp, source, overrides, wall_s)
        if then is not None:
            then(tmp)


def _write_meta(result, out: Path, source: str, overrides: list[str], wall_s: float) -> None:
    """meta.yaml: the run's seed, version, source, overrides and wall time."""
    meta = {"seed": result.scenario.run.seed, "version": package_version(), "source": source,
            "overrides": list(overrides), "wall_s": round(wall_s, 3), "complete": True}
    (out / "meta.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
