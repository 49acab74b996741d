"""The README's layout block and docs/architecture.md's module list, held against the tree: every
folder, file and module they name exists, and every package, benchmark, doc and published results
folder in the tree is named. Read off the files, nothing imported."""
import ast
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE_DIR = os.path.join(REPO, "fairseq_heads")


def code_block_after(path: str, heading: str) -> str:
    """The first ``` block after `heading` in a markdown file (the first of the file for "")."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start = text.index(heading) if heading else 0
    opening = text.index("```\n", start) + 4
    return text[opening:text.index("```", opening)]


def without_parentheses(text: str) -> str:
    """The text less what parentheses hold (nested ones too): the prose around the names."""
    while True:
        stripped = re.sub(r"\([^()]*\)", " ", text)
        if stripped == text:
            return text
        text = stripped


def entries(block: str, head_pattern: str) -> dict:
    """{head: its text}: a line that starts at column 0 opens an entry (its first word, which
    `head_pattern` must match), the indented lines after it continue that entry."""
    found, head = {}, None
    for line in block.splitlines():
        if line and not line[0].isspace():
            head, _, rest = line.partition(" ")
            assert re.fullmatch(head_pattern, head), f"{head!r} does not open an entry"
            found[head] = rest
        elif line.strip():
            assert head is not None, f"{line!r} continues no entry"
            found[head] += "\n" + line
    return found


def path_names(text: str) -> list:
    """The folder (`name/`) and file (`name.ext`) names in TEXT outside parentheses."""
    words = [w.strip(",;:") for w in without_parentheses(text).split()]
    return [w for w in words if w.endswith("/") or re.fullmatch(r"[\w./-]+\.(py|md|sh)", w)]


# ------------------------------------------------------------------ the README's layout block

README_LAYOUT = entries(code_block_after(os.path.join(REPO, "README.md"), "## Layout"), r"[\w./-]+/")


def test_the_readme_layout_names_only_what_exists():
    missing = [os.path.join(head, name) for head, text in README_LAYOUT.items()
               for name in [""] + path_names(text) if not os.path.exists(os.path.join(REPO, head, name))]
    assert missing == []


def listed(head: str) -> set:
    return {name.rstrip("/") for name in path_names(README_LAYOUT[head])}


def folders(path: str) -> set:
    return {name for name in os.listdir(path)
            if os.path.isdir(os.path.join(path, name)) and not name.startswith((".", "__"))}


def test_the_readme_layout_names_every_package_benchmark_doc_and_results_folder():
    packages = {name for name in folders(PACKAGE_DIR) if os.path.isfile(os.path.join(PACKAGE_DIR, name, "__init__.py"))}
    assert packages - listed("fairseq_heads/") == set()
    benchmarks = {name for name in os.listdir(os.path.join(REPO, "benchmarks")) if name.endswith(".py")}
    assert benchmarks - listed("benchmarks/") == set()
    docs = {name for name in os.listdir(os.path.join(REPO, "docs")) if name.endswith(".md")}
    assert docs - listed("docs/") == set()
    assert folders(os.path.join(REPO, "docs", "results")) - listed("docs/results/") == set()
    assert folders(os.path.join(REPO, "recipes")) - listed("recipes/") == set()


# ------------------------------------------------------------------ architecture.md's module list

ARCHITECTURE = code_block_after(os.path.join(REPO, "docs", "architecture.md"), "")


def architecture_entries() -> dict:
    """{package folder or "": its text}: the block's lines of top-level modules ("heads.py ...")
    and their indented description count as one entry of the package's own folder ("")."""
    found, head = {}, None
    for line in ARCHITECTURE.splitlines():
        if line and not line[0].isspace():
            first = line.split()[0]
            head = first if first.endswith("/") and os.path.isdir(os.path.join(PACKAGE_DIR, first)) else ""
            found[head] = found.get(head, "") + "\n" + line
        elif line.strip():
            found[head] += "\n" + line
    return found


def module_names(text: str) -> set:
    """What the text names as modules: file names (`x.py`), folders (`x/`) and snake_case words
    (`gate_table`), not options (`--head-mask`) or commands in backquotes."""
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"--[\w-]+", " ", text)
    words = {w.strip(",;:()") for w in text.split()}
    return {w for w in words if re.fullmatch(r"\w+(\.py|/)", w) or re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)+", w)}


def exists_under(folder: str, name: str) -> bool:
    """NAME (`x.py`, `x/` or `x`) is a module or package somewhere under FOLDER."""
    stem = name.rstrip("/")[:-3] if name.endswith(".py") else name.rstrip("/")
    for directory, subfolders, files in os.walk(folder):
        if f"{stem}.py" in files or stem in subfolders:
            return True
    return False


def top_level(name: str) -> bool:
    """NAME is one of the package's own modules or packages (a line may name several: `tasks/ optim/`)."""
    stem = name.rstrip("/")[:-3] if name.endswith(".py") else name.rstrip("/")
    return os.path.isfile(os.path.join(PACKAGE_DIR, f"{stem}.py")) or os.path.isdir(os.path.join(PACKAGE_DIR, stem))


def test_architecture_names_only_modules_that_exist():
    missing = [(head or "fairseq_heads/", name) for head, text in architecture_entries().items()
               for name in sorted(module_names(text))
               if not (exists_under(os.path.join(PACKAGE_DIR, head), name) or top_level(name))]
    assert missing == []


def test_architecture_names_every_package_and_top_level_module():
    named = {name.rstrip("/") for name in module_names(ARCHITECTURE)}
    named |= {name[:-3] for name in named if name.endswith(".py")}
    packages = {name for name in folders(PACKAGE_DIR) if os.path.isfile(os.path.join(PACKAGE_DIR, name, "__init__.py"))}
    modules = {name[:-3] for name in os.listdir(PACKAGE_DIR) if name.endswith(".py") and name != "__init__.py"}
    assert (packages | modules) - named == set()


# ------------------------------------------------------------------ the package docstring


def test_the_package_docstring_names_every_registration():
    """fairseq_heads/__init__.py says what importing it registers: every @register_* name."""
    registered = set()
    for directory, _, files in os.walk(PACKAGE_DIR):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(directory, name), encoding="utf-8") as f:
                    registered |= set(re.findall(r"@register_(?:model|criterion|task|optimizer)\(\"(\w+)\"", f.read()))
    with open(os.path.join(PACKAGE_DIR, "__init__.py"), encoding="utf-8") as f:
        docstring = ast.get_docstring(ast.parse(f.read()))
    assert len(registered) >= 8 and {name for name in registered if f"`{name}`" not in docstring} == set()
