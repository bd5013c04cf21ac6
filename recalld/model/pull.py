"""`recalld models pull`: download a GGUF (or the embedder's bundle) listed in the manifest,
verified before it is used.

huggingface-hub is optional (the `pull` extra): with it, an entry that names a Hugging Face
file comes through the hub's cache; without it, plain urllib fetches the entry's url.
"""

import hashlib
import importlib.util
import os
from pathlib import Path

from recalld.model import resolve
from recalld.model.errors import LLMError


def sha256_file(path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(chunk), b""):
            h.update(b)
    return h.hexdigest()


def pull_dir() -> Path:
    """Where `models pull` writes: the checkout's models/ when writable, else RECALLD_HOME/models."""
    d = resolve.repo_models_dir()
    if d.is_dir() and os.access(d, os.W_OK):
        return d
    return resolve.home_models_dir()


def manifest_entry(name: "str | None" = None, manifest=None) -> dict:
    entries = resolve.read_manifest() if manifest is None else manifest
    if not entries:
        raise LLMError(f"no models listed in {resolve.manifest_path()}")
    if name is None:
        return entries[0]
    for e in entries:
        if name in (e.get("name"), e.get("file")):
            return e
    raise LLMError(f"no model named {name!r} in the manifest; listed: {', '.join(e['name'] for e in entries)}")


def pull(entry: dict, dest_dir=None, *, force: bool = False, progress=None) -> Path:
    """Download a manifest entry's GGUF, verify its size and sha256, and only then move it into
    place (a failed or tampered download never leaves a file that resolution would pick up).

    huggingface-hub is used when it is installed and the entry names a Hugging Face file;
    otherwise plain urllib (any http(s):// or file:// URL). An entry with `files` (the
    embedder's bundle) goes to pull_bundle."""
    if entry.get("files"):
        return pull_bundle(entry, dest_dir, force=force, progress=progress)
    file = entry.get("file") or Path(entry.get("url", "")).name
    want = (entry.get("sha256") or "").lower()
    if not file or not file.endswith(".gguf"):
        raise LLMError(f"manifest entry {entry.get('name')!r} names no .gguf file")
    if not want:
        raise LLMError(f"manifest entry {entry.get('name')!r} has no sha256; refusing an unverifiable download")
    dest_dir = Path(dest_dir) if dest_dir else pull_dir()
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / file
    if dest.exists() and not force:
        if sha256_file(dest) == want:
            return dest
        raise LLMError(f"{dest} exists but its sha256 does not match the manifest; use --force to replace it")
    part = dest_dir / (file + ".part")
    try:
        got_path = _download(entry, part, progress)
        got = sha256_file(got_path)
        if got != want:
            raise LLMError(f"checksum mismatch for {file}: expected sha256 {want}, got {got}; the download was deleted")
        size = entry.get("size")
        if size and os.path.getsize(got_path) != int(size):
            raise LLMError(f"size mismatch for {file}: expected {size} bytes, got {os.path.getsize(got_path)}")
        if not resolve.is_gguf(got_path):
            raise LLMError(f"{file}: the download is not a GGUF file")
        os.replace(got_path, dest)
        return dest
    finally:
        if part.exists():
            part.unlink()


def pull_bundle(entry: dict, dest_dir=None, *, force: bool = False, progress=None) -> Path:
    """Download a multi-file entry (the embedder's bundle: weights, tokenizer, config) into
    `<dest_dir>/<entry dir>`, each file's size and sha256 checked. The files land in a .part
    directory that is renamed into place only when all of them passed, so resolution never
    sees half a bundle. Plain urllib: each file's url is pinned to a revision."""
    import shutil

    name = entry.get("dir") or entry.get("name")
    files = entry.get("files") or []
    bad = [f for f in files if not (f.get("name") and f.get("url") and len(f.get("sha256") or "") == 64)]
    if not name or not files or bad or any("/" in f["name"] or f["name"].startswith(".") for f in files):
        raise LLMError(f"manifest entry {entry.get('name')!r}: every file needs a plain name, a url and a sha256")
    dest_dir = Path(dest_dir) if dest_dir else pull_dir()
    dest = dest_dir / name
    if dest.exists() and not force:
        wrong = [f["name"] for f in files if not (dest / f["name"]).is_file()
                 or sha256_file(dest / f["name"]) != f["sha256"].lower()]
        if not wrong:
            return dest
        raise LLMError(f"{dest} exists but {', '.join(wrong)} does not match the manifest; use --force to replace it")
    part = dest_dir / (name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    try:
        for f in files:
            got = _download({"name": entry.get("name"), "url": f["url"]}, part / f["name"], progress)
            digest = sha256_file(got)
            if digest != f["sha256"].lower():
                raise LLMError(f"checksum mismatch for {f['name']}: expected sha256 {f['sha256']}, got {digest}; "
                               f"the download was deleted")
            if f.get("size") and os.path.getsize(got) != int(f["size"]):
                raise LLMError(f"size mismatch for {f['name']}: expected {f['size']} bytes, got {os.path.getsize(got)}")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(part, dest)
        return dest
    finally:
        shutil.rmtree(part, ignore_errors=True)


def _download(entry: dict, part: Path, progress) -> Path:
    hf = entry.get("hf") or {}
    if hf.get("repo") and hf.get("file") and importlib.util.find_spec("huggingface_hub") is not None:
        from huggingface_hub import hf_hub_download

        got = hf_hub_download(repo_id=hf["repo"], filename=hf["file"], revision=hf.get("revision"))
        # hf_hub_download returns a path in its own cache; copy so the checksum guards our copy.
        import shutil

        shutil.copyfile(got, part)
        return part
    url = entry.get("url")
    if not url:
        raise LLMError(f"manifest entry {entry.get('name')!r} has no url")
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=60) as r, open(part, "wb") as f:
            total = int(r.headers.get("Content-Length") or 0) or None
            done = 0
            for chunk in iter(lambda: r.read(1 << 20), b""):
                f.write(chunk)
                done += len(chunk)
                if progress:
                    progress(done, total)
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise LLMError(f"download of {url} failed: {getattr(e, 'reason', None) or e}") from None
    return part
