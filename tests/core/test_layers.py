"""The package's layering (docs/architecture.md): no import circle, lazy imports included, no
module importing from a layer above its own, and no module over 400 lines. Read off the source
(ast), nothing imported."""
import ast
import os

import fairseq_heads

ROOT = os.path.dirname(fairseq_heads.__file__)
PACKAGE = "fairseq_heads"
# Bottom up; a module may import from its own layer and the layers below it.
LAYERS = [
    {"heads", "files", "numbers", "plotting", "bleu", "errors", "compat", "checkpoints", "convergence",
     "precision", "cpu_memory"},
    {"gating", "data"},
    {"models", "criterions", "tasks", "optim"},
    {"stats"},
    {"pruning", "hf"},
    {"report"},
    {"commands"},
    {"pipeline"},
    {"commands.recipe", "commands.publish", "commands.carry"},  # the commands over the pipeline (the others are below it)
    {"cli"},
]


def modules():
    """{module name: path} of every module of the package."""
    found = {}
    for directory, _, names in os.walk(ROOT):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                parts = [PACKAGE] + os.path.relpath(path, ROOT)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                found[".".join(parts)] = path
    return found


def imports_of(module: str, path: str, known) -> set:
    """The package modules `module` imports anywhere in its body (functions too)."""
    is_package = path.endswith("__init__.py")
    here = module.split(".") if is_package else module.split(".")[:-1]
    targets = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = here[:len(here) - node.level + 1] if node.level else []
            origin = ".".join(base + ([node.module] if node.module else []))
            names = [f"{origin}.{alias.name}" for alias in node.names]
            if not (module + ".").startswith(origin + "."):  # `from . import x` imports x only
                names.append(origin)
        else:
            continue
        for name in names:
            if name in known and name != module:
                targets.add(name)
    # importing a.b.c runs a.b's __init__ first: an edge to every package above the target
    # that is not also above the importer
    for target in list(targets):
        parts = target.split(".")
        for n in range(2, len(parts)):
            package = ".".join(parts[:n])
            if package in known and not module.startswith(package + ".") and package != module:
                targets.add(package)
    return targets


def graph():
    known = modules()
    return {m: imports_of(m, p, known) for m, p in known.items()}


def layer_of(module: str) -> int:
    """The layer of a module: that of its own name under the package where LAYERS names it
    (commands.recipe), else that of its top-level package or module."""
    parts = module.split(".")[1:]
    for depth in (2, 1):
        name = ".".join(parts[:depth])
        found = [i for i, names in enumerate(LAYERS) if name in names]
        if len(parts) >= depth and found:
            return found[0]
    raise AssertionError(f"{module} is in no layer of LAYERS")


def test_no_import_circles():
    edges = graph()
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    assert cycles == []


def test_no_module_imports_from_a_layer_above_its_own():
    upward = [(m, t) for m, targets in graph().items() if m != PACKAGE
              for t in targets if t != PACKAGE and layer_of(t) > layer_of(m)]
    assert upward == []


MAX_MODULE_LINES = 400  # docs/architecture.md: a longer module is split by job


def test_no_module_is_over_400_lines():
    longer = {m: n for m, p in modules().items()
              if (n := sum(1 for _ in open(p, encoding="utf-8"))) > MAX_MODULE_LINES}
    assert longer == {}
