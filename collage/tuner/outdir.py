"""Where an artifact goes: the output location's checks (before any measuring) and putting a finished artifact
there without losing a file of the user's.

``OUT`` (``collage tune -o OUT``) may be:

- missing: the artifact is built beside it and renamed into place;
- an empty directory, or a collage artifact: replaced. An artifact is a directory whose ``manifest.json``
  collage wrote: it reads as a manifest (:func:`collage.runtime.manifest.read_manifest`: format version,
  fields) and every file it lists is there with its recorded sha256. Files the manifest does not list (a
  NOTES.md, inputs saved beside it) are the user's: they are carried over into the new artifact (hard links
  where possible) and named in one log line. A ``report.html`` (``collage report OUT`` wrote it from the old
  artifact) is not carried over: it would describe the old plan;
- anything else (a non-empty directory without a manifest, one with somebody else's manifest.json, an
  artifact whose listed files were changed): refused, naming it, before anything is measured.

Replacing renames ``OUT`` aside and the new copy into place (:func:`_replace_dir`, journalled). A directory
that cannot be renamed (a mount point: ``docker run -v host:/out ... -o /out``; a parent folder that is not
writable) is written in place instead: the new copy is built inside ``OUT`` and its entries are moved in
one by one, the old ones moved aside first (:func:`_replace_in_place`, journalled inside ``OUT``). Either way
an interrupted replacement is finished or undone by the next check of ``OUT`` (:func:`recover_replaced`).
"""
from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from collage.errors import ArtifactError
from collage.runtime.manifest import MANIFEST, PLAN_FILE, REPORT_FILE, read_manifest

log = logging.getLogger(__name__)

#: written by ``collage report OUT`` from the artifact: stale once the artifact is replaced, so not carried over
DERIVED = ("report.html",)
#: prefix of collage's own scratch entries inside an artifact written in place (never the user's)
INTERNAL = ".collage-"
#: why a rename of OUT fails where writing inside it works: a mount point, another file system, no permission
_CANNOT_RENAME = {errno.EBUSY, errno.EXDEV, errno.EPERM, errno.EACCES, errno.EROFS}


@dataclasses.dataclass(frozen=True)
class OutputLocation:
    """What :func:`inspect_output` found at the artifact path ``out``."""

    out: Path
    in_place: bool = False  # OUT cannot be renamed: the artifact is written inside it
    kept: tuple[str, ...] = ()  # the user's files in the old artifact (relative POSIX paths), carried over
    dropped: tuple[str, ...] = ()  # derived files of the old artifact that are not carried over (report.html)
    replaced: tuple[str, ...] = ()  # top-level names of the old artifact's own entries (moved away in place)
    # every entry under OUT when it was inspected: (relative POSIX path, size, mtime in ns); the export compares it
    # (stat calls only) with what is there then, and inspects OUT again, checksums included, only if it differs
    snapshot: tuple[tuple[str, int, int], ...] = ()


def check_output_location(out_dir: str | os.PathLike, *, archive: bool = False) -> Path:
    """The resolved artifact path, or ArtifactError naming what is wrong with it: checked before any work
    (``collage tune``, ``collage.tune`` and ``collage bench --artifacts`` call it before measuring). It must be
    an empty directory or a collage artifact (replaced; the user's files in it are kept), or not exist yet with
    the nearest existing folder above it writable. ``archive``: ``<out>.tar.gz`` will be written beside it."""
    return inspect_output(out_dir, archive=archive).out


def inspect_output(out_dir: str | os.PathLike, *, archive: bool = False) -> OutputLocation:
    """:func:`check_output_location`, with what the export needs to know: write in place, files to keep."""
    out = Path(out_dir).expanduser().resolve()
    recover_replaced(out)
    if out.exists() and not out.is_dir():
        raise ArtifactError(f"{out} exists and is not a directory; choose another output path")
    if not out.exists():
        _check_creatable(out)
        where = OutputLocation(out)
    else:
        kept, dropped, replaced = _user_files(out)
        why = _why_not(out)
        if why:
            raise ArtifactError(f"{out}: cannot write in this directory ({why}); choose a writable output directory")
        in_place = is_mount_point(out) or not _can_write_in(out.parent)
        where = OutputLocation(out, in_place, kept, dropped, replaced, snapshot(out))
    if archive:
        _check_archive(where)
    return where


def _walk(out: Path) -> Iterator[tuple[Path, list[str], list[str]]]:
    """``os.walk(out)`` as (folder, its folders, its files), collage's scratch entries at the top left out."""
    for root, dirs, files in os.walk(out):
        here = Path(root)
        if here == out:
            dirs[:] = [d for d in dirs if not d.startswith(INTERNAL)]  # os.walk then skips them
            files = [f for f in files if not f.startswith(INTERNAL)]
        yield here, dirs, files


def snapshot(out: Path) -> tuple[tuple[str, int, int], ...]:
    """Every entry under ``out`` (collage's scratch entries left out) with its size and modification time."""
    found = []
    for here, dirs, files in _walk(out):
        for name in dirs + files:
            try:
                st = (here / name).lstat()
            except FileNotFoundError:
                continue
            found.append(((here / name).relative_to(out).as_posix(), st.st_size, st.st_mtime_ns))
    return tuple(sorted(found))


def as_inspected(where: OutputLocation, *, archive: bool = False) -> OutputLocation:
    """``where`` if OUT is as it was when the tune inspected it, else OUT inspected again: a file the user added
    during the tune is kept too, and a listed file changed meanwhile makes OUT no longer collage's to replace."""
    now_exists = where.out.exists()
    if (now_exists and where.snapshot and snapshot(where.out) == where.snapshot) or (
            not now_exists and not where.snapshot and not where.kept and not where.replaced):
        return where
    return inspect_output(where.out, archive=archive)


def _check_creatable(out: Path) -> None:
    above = out.parent
    while not above.exists():
        above = above.parent
    if not above.is_dir():
        raise ArtifactError(f"{out}: {above} is a file, so no directory can be made under it; choose another "
                            "output path")
    if not _can_write_in(above):
        raise ArtifactError(f"{out}: cannot write under {above} ({_why_not(above)}); choose a writable output path")


def _can_write_in(folder: Path) -> bool:
    return _why_not(folder) is None


def _why_not(folder: Path) -> str | None:
    """None when a folder can be made in ``folder``, else why not. Really tried: permissions, read-only
    mounts, immutable directories, quotas (os.access says yes to root on a read-only mount)."""
    try:
        Path(tempfile.mkdtemp(prefix=f"{INTERNAL}probe-", dir=folder)).rmdir()
    except OSError as e:
        return e.strerror or str(e)
    return None


def _check_archive(where: OutputLocation) -> None:
    dest = archive_path(where.out)
    if os.path.lexists(dest) and (dest.is_symlink() or not dest.is_file()):
        raise ArtifactError(f"--archive: {dest} exists and is not a file; move it away or choose another output path")
    if where.in_place and not _can_write_in(where.out.parent):
        raise ArtifactError(f"--archive: cannot write {dest} beside the artifact ({where.out.parent} is not "
                            "writable); leave out --archive or choose another output path")
    links = [k for k in where.kept if (where.out / k).is_symlink()]
    if links:
        raise ArtifactError(f"--archive: {where.out / links[0]} is a symbolic link, and an archive holds none; "
                            "move it out of the artifact or leave out --archive")


def archive_path(out: Path) -> Path:
    """Where ``--archive`` writes the archive of the artifact ``out``: ``<out>.tar.gz`` beside it."""
    return out.parent / (out.name + ".tar.gz")


def is_mount_point(path: Path) -> bool:
    """``path`` is a mount point (also a bind mount of a folder of the same file system, which os.path.ismount
    does not see): it cannot be renamed or removed."""
    if os.path.ismount(path):
        return True
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            points = {_unescape(line.split()[4]) for line in f if len(line.split()) > 4}
    except OSError:
        return False
    return str(path) in points


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as \040, \011, \012, \134
    return field.encode().decode("unicode_escape").encode("latin-1").decode("utf-8", errors="replace")


def _user_files(out: Path) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The entries of the directory ``out`` that are the user's (kept), the derived ones (dropped) and the top
    names of the artifact's own files; refused when ``out`` is not empty and not a collage artifact whose listed
    files are all as it wrote them. An entry is a file, a symbolic link or an empty folder."""
    entries = [p for p in out.iterdir() if not p.name.startswith(INTERNAL)]
    if not entries:
        return (), (), ()
    if not (out / MANIFEST).is_file():
        raise ArtifactError(f"{out} exists, is not empty and is not a collage artifact (no {MANIFEST}); "
                            "choose another output directory or remove it")
    owned = owned_files(out)
    owned_dirs = dirs_of(owned)
    kept, dropped = [], []
    for here, dirs, files in _walk(out):
        leaves = files + [d for d in dirs if (here / d).is_symlink() or _is_empty(here / d)]
        for name in leaves:
            rel = (here / name).relative_to(out).as_posix()
            if rel not in owned and rel not in owned_dirs:
                (dropped if rel in DERIVED else kept).append(rel)
    tops = {Path(f).parts[0] for f in owned} | set(dropped)
    return tuple(sorted(kept)), tuple(sorted(dropped)), tuple(sorted(tops))


def _is_empty(folder: Path) -> bool:
    with os.scandir(folder) as it:
        return next(it, None) is None


def owned_files(out: Path) -> set[str]:
    """The files (relative POSIX paths) the artifact ``out``'s manifest lists: the manifest, plan and report and
    each partition's files. ArtifactError when the manifest is not collage's or a listed file was changed: such a
    directory is not replaced (it is not collage's to delete)."""
    from collage.runtime.artifact import verify_files

    try:
        manifest = read_manifest(out)
        verify_files(out, manifest)
    except ArtifactError as e:
        raise ArtifactError(f"{out} holds a {MANIFEST} but is not a collage artifact as collage wrote it ({e}); "
                            "not replacing it: choose another output directory, or move it away") from None
    return listed_files(manifest)


def listed_files(manifest: dict) -> set[str]:
    """The files (relative POSIX paths) a checked manifest lists, itself included."""
    owned = {MANIFEST, str(manifest.get("plan", PLAN_FILE)), str(manifest.get("report", REPORT_FILE))}
    for part in manifest["partitions"]:
        owned.update((Path(part["dir"]) / str(f["name"])).as_posix() for f in part["files"])
    return owned


def dirs_of(files: set[str]) -> set[str]:
    """Every folder above one of ``files`` (relative POSIX paths)."""
    return {p.as_posix() for f in files for p in Path(f).parents if p != Path(".")}


# ---------------------------------------------------------------------------------------------- carrying over

def carry_over(where: OutputLocation, new: Path) -> dict[str, str]:
    """Link (or copy) the user's files of the old artifact into the new copy ``new`` (complete but for its
    manifest), each at its own path; written in place, only those under an entry that is replaced (the
    others stay where they are). A name the new artifact has too gets ``.kept`` added: {path: new path} of those.
    The old copy is left as it is (a crash here loses nothing)."""
    away = set(where.replaced) | {p.name for p in new.iterdir()} | {MANIFEST}
    renamed = {}
    for rel in where.kept:
        if where.in_place and Path(rel).parts[0] not in away:
            continue
        dest = rel
        k = 1
        while os.path.lexists(new / dest):
            dest, k = f"{rel}.kept" if k == 1 else f"{rel}.kept{k}", k + 1
        if dest != rel:
            renamed[rel] = dest
        (new / dest).parent.mkdir(parents=True, exist_ok=True)
        link_or_copy(where.out / rel, new / dest)
    return renamed


def link_or_copy(src: Path, dest: Path) -> None:
    """``src`` (a file, a symbolic link, a folder) at ``dest``: a hard link where the file system allows it."""
    if src.is_symlink():
        os.symlink(os.readlink(src), dest)
    elif src.is_dir():
        dest.mkdir()
        for child in src.iterdir():
            link_or_copy(child, dest / child.name)
    else:
        try:
            os.link(src, dest)
        except OSError:
            shutil.copy2(src, dest)


def kept_line(where: OutputLocation, renamed: dict[str, str]) -> str | None:
    """The one log line that says which of the user's files were carried over (None: there were none)."""
    if not where.kept and not where.dropped:
        return None
    shown = [renamed.get(k, k) for k in where.kept]
    said = []
    if shown:
        text = f"kept {len(shown)} file(s) not part of the old artifact: {', '.join(shown[:8])}"
        if len(shown) > 8:
            text += f" and {len(shown) - 8} more"
        if renamed:
            text += f" ({', '.join(f'{k} as {v}' for k, v in renamed.items())}: the new artifact has that name)"
        said.append(text)
    if where.dropped:
        said.append(f"dropped the old {', '.join(where.dropped)} (`collage report {where.out}` writes it anew)")
    return f"{where.out}: " + "; ".join(said)


# ---------------------------------------------------------------------------------------------- replacing

def warn_kept(where: OutputLocation, renamed: dict[str, str]) -> None:
    """Log :func:`kept_line` (as a warning: the user's files are somewhere they may not expect) if there is one."""
    line = kept_line(where, renamed)
    if line:
        log.warning("%s", line)


def umask() -> int:
    """The process's umask (read without changing it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def staging_dir(where: OutputLocation) -> Path:
    """A new empty folder to build the artifact in: beside ``out``, or inside it when it is written in place."""
    if where.in_place:
        return Path(tempfile.mkdtemp(prefix=f"{INTERNAL}new-", dir=where.out))
    where.out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{where.out.name}.tmp-", dir=where.out.parent))


def install(new: Path, where: OutputLocation) -> None:
    """Put the complete artifact ``new`` (from :func:`staging_dir`, its manifest written last) at ``where.out``.
    Where ``out`` turns out not to be renamable (a bind mount of the same file system, which only the rename
    tells), the artifact is written in place after all (copied in: ``new`` is on the file system above)."""
    if where.in_place:
        _replace_in_place(new, where.out, where.replaced)
        return
    try:
        _replace_dir(new, where.out)
    except OSError as e:
        if e.errno not in _CANNOT_RENAME or not where.out.is_dir():
            raise
        log.info("%s cannot be replaced (%s): writing the artifact in place", where.out, e.strerror)
        staged = Path(tempfile.mkdtemp(prefix=f"{INTERNAL}new-", dir=where.out))
        try:
            # the new artifact's entries and what was carried over into them; not the user's top-level entries,
            # which stay where they are
            away = set(where.replaced) | {Path(f).parts[0] for f in listed_files(read_manifest(new))}
            theirs = {Path(k).parts[0] for k in where.kept} - away
            for entry in new.iterdir():
                if entry.name not in theirs:
                    link_or_copy(entry, staged / entry.name)
            os.chmod(staged, 0o777 & ~umask())
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        shutil.rmtree(new, ignore_errors=True)
        _replace_in_place(staged, where.out, where.replaced)


def _replace_dir(tmp: Path, out: Path) -> None:
    """Put the complete artifact ``tmp`` at ``out``, replacing what is there.

    Replacing is two renames (``out`` -> ``.<name>.old-*``, then ``tmp`` -> ``out``). A crash between them
    would leave ``out`` missing with both copies hidden beside it, so the old copy's name is first written
    to ``.<name>.replacing`` (with the new one's): the next export or ``collage tune`` to ``out``
    (``check_output_location``) calls :func:`recover_replaced`, which finishes the replacement (the new
    copy is complete: it has its manifest) or restores the old copy. OSError from the first rename (``out``
    cannot be renamed) leaves everything as it was.
    """
    os.chmod(tmp, 0o777 & ~umask())  # mkdtemp made it 0700
    old = None
    journal = _journal(out)
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.rmdir(old)
        _write_journal(journal, {"old": old.name, "new": tmp.name})
        try:
            os.rename(out, old)
        except BaseException:
            journal.unlink(missing_ok=True)
            raise
    try:
        os.rename(tmp, out)
    except BaseException:
        if old is not None:
            os.rename(old, out)
        journal.unlink(missing_ok=True)
        raise
    journal.unlink(missing_ok=True)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _replace_in_place(new: Path, out: Path, replaced: tuple[str, ...]) -> None:
    """Put the complete artifact ``new`` (a folder inside ``out``) at ``out`` without renaming ``out``: the old
    artifact's entries (``replaced``, and any of the new one's names) are moved into a folder ``.collage-old-*``
    beside ``new``, the manifest first (``out`` no longer looks complete), then the new entries are moved in,
    the manifest last. The two folders' names and the lists are first written to ``out/.collage-replacing``:
    :func:`recover_replaced` finishes an interrupted replacement (the new copy is complete before the journal
    is written). Entries of ``out`` that are neither (the user's) are not touched."""
    os.chmod(new, 0o777 & ~umask())
    names = sorted((p.name for p in new.iterdir()), key=lambda n: (n == MANIFEST, n))
    away = [n for n in sorted(set(replaced) | set(names), key=lambda n: (n != MANIFEST, n))
            if os.path.lexists(out / n)]
    old = Path(tempfile.mkdtemp(prefix=f"{INTERNAL}old-", dir=out))
    journal = out / f"{INTERNAL}replacing"
    _write_journal(journal, {"old": old.name, "new": new.name, "names": names, "away": away})
    try:
        for n in away:
            os.rename(out / n, old / n)
        for n in names:
            os.rename(new / n, out / n)
    except BaseException:
        _recover_in_place(out)
        raise
    journal.unlink(missing_ok=True)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(new, ignore_errors=True)


def _write_journal(journal: Path, state: dict) -> None:
    tmp = journal.with_name(journal.name + ".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, journal)  # whole or not at all


def _journal(out: Path) -> Path:
    return out.parent / f".{out.name}.replacing"


# ---------------------------------------------------------------------------------------------- recovering

def recover_replaced(out: str | os.PathLike) -> str | None:
    """Finish or undo a replacement of the artifact ``out`` that a crash interrupted (see ``_replace_dir`` and
    ``_replace_in_place``); what was done (a sentence), or None when there was nothing to do."""
    out = Path(out)
    done = _recover_renamed(out)
    if out.is_dir():
        done = _recover_in_place(out) or done
    if done:
        log.warning("%s", done)
    return done


def _read_journal(journal: Path, keys: tuple[str, ...]) -> dict | None:
    try:
        state = json.loads(journal.read_text())
        if not all(Path(str(state[k])).name == str(state[k]) != "" for k in keys):
            return None  # names only, beside out or in it: anything else is not ours
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError, KeyError, TypeError):
        log.warning("%s: unreadable replacement journal; leaving it", journal)
        return None
    return state


def _recover_renamed(out: Path) -> str | None:
    journal = _journal(out)
    state = _read_journal(journal, ("old", "new"))
    if state is None:
        return None
    old, new = out.parent / str(state["old"]), out.parent / str(state["new"])
    done = None
    if not out.exists():
        if (new / MANIFEST).is_file():
            os.rename(new, out)
            done = f"{out}: finished replacing the artifact (a previous export was interrupted)"
        elif old.is_dir():
            os.rename(old, out)
            done = f"{out}: restored the previous artifact (a previous export was interrupted)"
    if out.exists():
        for leftover in (old, new):
            if leftover.exists() and leftover.resolve() != out.resolve():
                shutil.rmtree(leftover, ignore_errors=True)
        journal.unlink(missing_ok=True)
    return done


def _recover_in_place(out: Path) -> str | None:
    journal = out / f"{INTERNAL}replacing"
    state = _read_journal(journal, ("old", "new"))
    if state is None:
        return None
    old, new = out / str(state["old"]), out / str(state["new"])
    names = [str(n) for n in state.get("names", []) if Path(str(n)).name == str(n)]
    away = [str(n) for n in state.get("away", []) if Path(str(n)).name == str(n)]
    done = None
    if (new / MANIFEST).is_file():  # the new copy is complete (the journal is written after it): finish
        old.mkdir(exist_ok=True)
        for n in away:
            moved_in = n in names and not os.path.lexists(new / n)
            if os.path.lexists(out / n) and not moved_in and not os.path.lexists(old / n):
                os.rename(out / n, old / n)
        for n in names:
            if os.path.lexists(new / n) and not os.path.lexists(out / n):
                os.rename(new / n, out / n)
        done = f"{out}: finished replacing the artifact in place (a previous export was interrupted)"
    elif not (out / MANIFEST).is_file() and old.is_dir():  # never complete: put the old entries back
        for entry in old.iterdir():
            if not os.path.lexists(out / entry.name):
                os.rename(entry, out / entry.name)
        done = f"{out}: restored the previous artifact (a previous export in place was interrupted)"
    journal.unlink(missing_ok=True)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(new, ignore_errors=True)
    return done
