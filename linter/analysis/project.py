"""Project-wide analysis: the files linted together, each read once.

1. Parse every file that can hold a prompt and collect its facts (`facts.parse`).
2. Read each module's top level, then link: names imported from the project become known where used.
3. Read each module's functions once. Sites are found as in a single file; calls to the project's
   own functions are noted with the shapes of their arguments.
4. Propagate. A function whose parameter reaches a sink inside it is a *wrapper*, summarised by that
   site. A noted call to a wrapper is a site at the call, with the argument where the parameter was
   and the chain of wrappers in the message (the calls that can never reach one are let go during the
   walk: `bodies.NotedCalls`). Repeated until no new wrapper appears, at most `_ROUNDS` times.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from .bodies import Bodies, NotedCalls, callee_only, placed, source_text
from .calls import Evaluator
from .facts import PLAIN_NAME, Parsed, ParseFailure, called_names, called_suffixes, hot_lines, parse
from .reader import (
    finish_walk,
    functions_of,
    has_parameters,
    message_list,
    parameters,
    reads_parameters,
    start_walk,
    template_constant_sites,
)
from .scope import Module, ParamRef, Scope, elsewhere
from .shape import Shape
from .sinks import SinkReader, chain, is_template_call
from .site import Segment, Site
from .walker import Walker

_ROUNDS = 4
_FEW_WORDS = 400  # up to this many function names, search for each; above, list the names a file calls

Key = tuple[str, str | None, str]  # (module, class or None, function)


@dataclass
class Wrapper:
    key: Key
    site: Site
    via: str  # "`ask()` → `client.chat.completions.create`"


@dataclass
class Call:
    entry: Entry
    node: ast.Call
    targets: list[Key]
    args: list[Shape]
    kwargs: dict[str, Shape]
    templates: dict[int | str, Shape]
    messages: dict[int | str, list[Segment]] = field(default_factory=dict)  # message-list arguments
    done: bool = False


@dataclass
class Entry:
    path: Path
    parsed: Parsed  # its `source` is "" in a lean project, which holds it compressed (`source_text`)
    report: bool
    sites: list[Site] = field(default_factory=list)
    walker: Walker | None = None


class Project:
    """The modules linted together and what their functions do with their parameters."""

    def __init__(self, lean: bool = False) -> None:
        self.bodies = Bodies() if lean else None  # lean: functions' bodies dropped until read (`bodies`)
        self.entries: list[Entry] = []
        self.entry_of: dict[int, Entry] = {}  # id(module) -> its entry
        self.modules: dict[str, list[Module]] = {}  # dotted name and each dotted suffix -> modules
        self.functions: dict[Key, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.owners: dict[Key, Module] = {}
        self.twins: set[Key] = set()  # keys defined more than once (`functions` holds the first)
        self.names: set[str] = set()  # simple names of every function and method
        self.methods: dict[str, dict[str, list[Key]]] = {}  # method name -> module name -> its keys
        self.wrappers: dict[Key, Wrapper] = {}
        self.calls: list[Call] = []
        self.noted = NotedCalls()  # sweeps `calls` during the walk
        self.lazy: dict[str, tuple[Path, str]] = {}  # modules without prompt words, parsed if imported
        self.quiet: list[tuple[Path, str, str]] = []  # reported files without prompt words
        self._imports: dict[int, list[Module]] = {}  # id(module) -> the project modules it imports
        self._connected: dict[int, list[Module]] = {}  # id(module) -> `connected(module)`
        self._near: dict[int, set[str]] = {}  # id(module) -> the names of `connected(module)`
        self._importers: dict[int, list[Module]] | None = None  # id(module) -> the modules importing it
        self._reads: dict[Key, bool] = {}  # `may_wrap`'s `reads_parameters`, by function

    # -- building ------------------------------------------------------------------------
    def add(self, path: Path, parsed: Parsed, report: bool) -> None:
        module = parsed.module
        module.project = self
        self.entries.append(Entry(path, parsed, report))
        self.entry_of[id(module)] = self.entries[-1]
        parts = module.name.split(".") if module.name else [path.stem]
        for i in range(len(parts)):
            self.modules.setdefault(".".join(parts[i:]), []).append(module)
        for fn, cls in functions_of(parsed):
            key = (module.name, cls, fn.name)
            if self.functions.setdefault(key, fn) is not fn:
                self.twins.add(key)
            self.owners.setdefault(key, module)
            self.names.add(fn.name)
            if cls is not None:
                self.methods.setdefault(fn.name, {}).setdefault(module.name, []).append(key)
        if self.bodies is not None:
            self.bodies.release(module, parsed.source, functions_of(parsed))
            self.entries[-1].parsed = parsed._replace(source="")

    def defer(self, path: Path, source: str, name: str, report: bool = False) -> None:
        """A module without prompt words: read if imported from, or (reported) if it may call a wrapper."""
        if report:
            self.quiet.append((path, source, name))
        parts = name.split(".") if name else [path.stem]
        for i in range(len(parts)):
            self.lazy.setdefault(".".join(parts[i:]), (path, source))
        self.lazy[name] = (path, source)

    def module(self, dotted: str) -> Module | None:
        found = self.modules.get(dotted, [])
        if not found and dotted in self.lazy:
            path, source = self.lazy.pop(dotted)
            try:
                parsed = parse(source, path.as_posix(), dotted, force=True)
            except (ParseFailure, RecursionError):
                return None
            if parsed is not None:
                self.add(path, parsed, False)
                self.entries[-1].walker = start_walk(parsed, self.entries[-1].sites.append)
                found = self.modules.get(dotted, [])
        return found[0] if len(found) == 1 else None

    def resolve(self, qual: str) -> tuple[Module, str] | None:
        """`pkg.prompts.QA` -> (the module `pkg.prompts`, "QA"), for modules of this project."""
        parts = qual.split(".")
        for i in range(len(parts) - 1, 0, -1):
            module = self.module(".".join(parts[:i]))
            if module is not None:
                return module, ".".join(parts[i:])
        return None

    def link(self, module: Module) -> None:
        """Names `module` imports from the project: templates, constants (functions on use)."""
        for alias, qual in module.imports.items():
            whole = self.module(qual) if "." in qual or qual in self.modules else None
            if whole is not None and whole is not module:  # `from app import prompts`: `prompts.QA`
                for name, text in whole.literals.items():
                    module.imported_literals[f"{alias}.{name}"] = text
                for name, shape in whole.constants.items():
                    module.imported_constants.setdefault(f"{alias}.{name}", shape)
                continue
            found = self.resolve(qual)
            if found is None or found[0] is module:
                continue
            other, name = found
            if name in other.literals:
                module.imported_literals[alias] = other.literals[name]
            elif name in other.constants:
                module.imported_constants[alias] = other.constants[name]
            if isinstance(table := other.exprs.get(name), ast.Dict):
                module.imported_tables[alias] = table

    def imports_of(self, module: Module) -> list[Module]:
        """The project modules `module` imports (already added ones; sorted by name)."""
        key = id(module)
        if key not in self._imports:
            found: dict[str, Module] = {}
            for qual in module.imports.values():
                parts = qual.split(".")
                for i in range(len(parts), 0, -1):  # the module itself, or the package holding the name
                    hits = self.modules.get(".".join(parts[:i]), [])
                    if len(hits) == 1:
                        if hits[0] is not module:
                            found[hits[0].name] = hits[0]
                        break
            self._imports[key] = [found[name] for name in sorted(found)]
        return self._imports[key]

    def connected(self, module: Module) -> list[Module]:
        """`module`, then the project modules linked to it by imports, sorted by name: what it imports
        (two levels) and what imports it. A module's findings depend on these only, never on a module
        sharing a name with it: the same whatever else is linted, in any order."""
        key = id(module)
        if key not in self._connected:
            linked: dict[str, Module] = {}
            for first in self.imports_of(module):
                linked[first.name] = first
                for second in self.imports_of(first):
                    linked.setdefault(second.name, second)
            if self._importers is None:  # built once, over the modules added by then
                self._importers = {}
                for entry in self.entries:
                    for imported in self.imports_of(entry.parsed.module):
                        self._importers.setdefault(id(imported), []).append(entry.parsed.module)
            for other in self._importers.get(key, []):
                linked.setdefault(other.name, other)
            linked.pop(module.name, None)
            self._connected[key] = [module, *(linked[name] for name in sorted(linked))]
        return self._connected[key]

    def near(self, module: Module) -> set[str]:
        if id(module) not in self._near:  # the names of `connected(module)`, remembered
            self._near[id(module)] = {m.name for m in self.connected(module)}
        return self._near[id(module)]

    # -- reading -------------------------------------------------------------------------
    def run(self) -> None:
        self.mark_wrapper_calls()
        for entry in self.entries:
            entry.walker = start_walk(entry.parsed, entry.sites.append)
        for entry in list(self.entries):
            self.link(entry.parsed.module)
        if self.bodies is not None:
            self.bodies.drop_top_levels(self.entries)
        for entry in self.entries:
            if entry.walker is None:
                entry.walker = start_walk(entry.parsed, entry.sites.append)
            finish_walk(entry.parsed, entry.walker)
            entry.walker = None
            if self.bodies is not None:
                self.bodies.drop_read(entry.parsed.module)
            for site in list(entry.sites):
                self.learn(site)
            self.noted.after_walk(self, entry.parsed.module)
        for _ in range(_ROUNDS):
            if not self.propagate():
                break
        for entry in self.entries:  # every module's fillings known now
            template_constant_sites(entry.parsed.module, entry.sites.append)

    def mark_wrapper_calls(self) -> None:
        """Lines calling a possible wrapper (a function with parameters that may hold a sink) are worth a look."""
        holders: dict[str, set[str]] = {}  # a possible wrapper's name (lower-cased) -> the modules defining one
        for key, fn in self.functions.items():
            if has_parameters(fn) and self.owners[key].is_hot(fn.lineno, fn.end_lineno or fn.lineno):
                holders.setdefault(key[2].lower(), set()).add(key[0])
        calls = tuple(sorted(w + "(" for w in holders))
        few = len(calls) <= _FEW_WORDS  # search for each; else list the names a file calls, once
        for path, source, name in self.quiet:  # parsed if it may call one; its calls resolve by import only
            low = source.lower()
            if name in self.lazy and (any(w in low for w in calls) if few else holders.keys() & called_names(low)):
                del self.lazy[name]
                try:
                    parsed = parse(source, path.as_posix(), name, force=True)
                except (ParseFailure, RecursionError):
                    continue
                if parsed is not None:
                    self.add(path, parsed, True)
        odd = [w for w in holders if not PLAIN_NAME.fullmatch(w)]  # names `called_suffixes` may miss
        for entry in self.entries:  # lines calling a function of a connected module are worth a look
            module, low = entry.parsed.module, source_text(entry.parsed).lower()
            near = self.near(module)
            if few:  # `w(` in the text: `w` is one of `called_suffixes(low)`
                found = [w for w, owners in holders.items() if not owners.isdisjoint(near) and w + "(" in low]
            else:
                found = [w for w in called_suffixes(low) if w in holders] + [w for w in odd if w + "(" in low]
            hits = tuple(sorted({w + "(" for w in found if not holders[w].isdisjoint(near)}))
            if hits:
                module.hot_lines = hot_lines(low, module.num_lines, hits, module.hot_lines)

    def note_call(self, sinks: SinkReader, node: ast.Call, scope: Scope) -> None:
        """Remember a call that may reach one of the project's functions, with its arguments' shapes."""
        ev = sinks.ev
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name not in self.names:
            return
        targets = [t for t in self.targets(ev.module, func, scope) if self.may_wrap(t)]
        if not targets:  # no function this call may reach can ever be a wrapper: never a site here
            return
        entry = self.entry_of[id(ev.module)]
        args = [placed(ev.shape(a, scope)) for a in node.args if not isinstance(a, ast.Starred)]
        kwargs = {kw.arg: placed(ev.shape(kw.value, scope)) for kw in node.keywords if kw.arg}
        templates: dict[int | str, Shape] = {}
        places: list[tuple[int | str, ast.expr]] = list(enumerate(node.args))
        places += [(kw.arg, kw.value) for kw in node.keywords if kw.arg]
        messages: dict[int | str, list[Segment]] = {}
        for where, arg in places:
            if not isinstance(arg, ast.Starred) and ev.literal(arg, scope) is not None:
                templates[where] = placed(sinks.template_shape(arg, scope))
            elif message_list(arg, scope):
                messages[where] = [s._replace(shape=placed(s.shape)) for s in sinks.message_segments(arg, scope)]
        self.calls.append(Call(entry, callee_only(node), targets, args, kwargs, templates, messages))

    def targets(self, module: Module, func: ast.expr, scope: Scope) -> list[Key]:
        if isinstance(func, ast.Name):
            if func.id in module.functions:
                return [(module.name, None, func.id)]
            return self.imported(module, module.imports.get(func.id))
        if not isinstance(func, ast.Attribute):
            return []
        base = func.value
        if isinstance(base, ast.Name) and base.id in ("self", "cls") and scope.cls:
            own = (module.name, scope.cls, func.attr)
            if own in self.functions:
                return [own]
        root = base
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in module.imports:
            return self.imported(module, module.qualname(func))  # `llm_utils.ask(...)`
        # `self.llm.generate(...)`: a method of that name in a class of this module or one connected to it
        near = self.near(module)
        by_module = self.methods.get(func.attr, {})
        names = near & by_module.keys() if len(near) < len(by_module) else by_module.keys() & near
        return sorted(key for name in names for key in by_module[name])

    def imported(self, module: Module, qual: str | None) -> list[Key]:
        found = self.resolve(qual) if qual else None
        if found is None:
            return []
        cls, _, fn = found[1].rpartition(".")
        key = (found[0].name, cls or None, fn)
        return [key] if key in self.functions else []

    def may_wrap(self, key: Key) -> bool:
        """Whether `key` may become a wrapper: a function of the project whose parameters are known where its body
        is read (`reads_parameters`, remembered: fixed once the walk begins), as references to them arise only there."""
        if key in self.functions and key not in self._reads:
            self._reads[key] = reads_parameters(self.functions[key], self.owners[key])
        return key in self.twins or self._reads.get(key, False)

    def function_return(self, ev: Evaluator, node: ast.Call, qual: str) -> Shape | None:
        """The shape another module's function returns, placed at this call."""
        found = self.resolve(qual)
        if found is None or "." in found[1] or found[0] is ev.module or found[1] not in found[0].functions:
            return None
        other, name, spot = *found, elsewhere(node)
        shape = Evaluator(other, ev.read_function).function_return(name, node)
        return tuple(p._replace(node=node if p.is_dynamic else spot, flaws=()) for p in shape)

    # -- propagating ---------------------------------------------------------------------
    def learn(self, site: Site) -> bool:
        """Make the functions whose parameters reach `site` wrappers; whether any is new."""
        if site.confidence != "high":
            return False
        new = False
        for seg in site.segments:
            for part in seg.shape:
                node = part.node
                if isinstance(node, ParamRef) and node.fn not in self.wrappers and node.fn in self.functions:
                    sink = f"`{chain(site.node.func)}`" if isinstance(site.node, ast.Call) else "a prompt"
                    via = f"`{node.fn[2]}()` → " + (site.via or sink)
                    self.wrappers[node.fn] = Wrapper(node.fn, site, via)
                    new = True
        return new

    def propagate(self) -> bool:
        new = False
        for call in self.calls:
            if call.done:
                continue
            wrapper = next((self.wrappers[t] for t in call.targets if t in self.wrappers), None)
            if wrapper is None:
                continue
            call.done = True
            call.entry.sites.append(site := self.substitute(wrapper, call))
            new |= self.learn(site)
        return new

    def substitute(self, wrapper: Wrapper, call: Call) -> Site:
        """The wrapper's site as this call sends it: each argument where its parameter was."""
        fn = self.functions[wrapper.key]
        refs = parameters(fn, wrapper.key)
        bound: dict[str, tuple[Shape, Shape | None]] = {}
        sent: dict[str, list[Segment]] = {}  # parameters given a message list
        for name, ref in refs.items():
            if ref.index is not None and ref.index < len(call.args):
                bound[name] = (call.args[ref.index], call.templates.get(ref.index))
                if ref.index in call.messages:
                    sent[name] = call.messages[ref.index]
            if name in call.kwargs:
                bound[name] = (call.kwargs[name], call.templates.get(name))
                if name in call.messages:
                    sent[name] = call.messages[name]
        templated = isinstance(wrapper.site.node, ast.Call) and is_template_call(wrapper.site.node)
        spot = elsewhere(call.node)
        segments = []
        for seg in wrapper.site.segments:
            only = seg.shape[0].node if len(seg.shape) == 1 else None
            if isinstance(only, ParamRef) and only.fn == wrapper.key and only.id in sent:
                segments.extend(sent[only.id])  # `call(messages)` given a message list: its messages
                continue
            parts: list = []
            for p in seg.shape:
                node = p.node
                if isinstance(node, ParamRef) and node.fn == wrapper.key and node.id in bound:
                    shape, template = bound[node.id]
                    parts.extend(template if templated and template is not None else shape)
                else:
                    parts.append(p._replace(node=spot, flaws=tuple(f._replace(node=spot) for f in p.flaws)))
            segments.append(Segment(seg.role, tuple(parts)))
        return Site(call.node, segments, wrapper.site.confidence, wrapper.site.provider, wrapper.via)
