"""Logits of many token sequences that share prefixes, each shared prefix encoded once.

An exact audit reads a model at every (prompt, answer) sequence of a game's information states.
Those sequences share long prefixes: the chat template and system prompt in every domain, the
answers of one prompt, and in a repeated game the prompts of histories that agree up to where
their text first differs. Re-encoding every sequence costs
sequences x length tokens; encoding each distinct prefix once costs the number of nodes of the
sequences' prefix tree. `prefix_logits` builds that tree (compressed: one node per run of tokens
without a branch), encodes each node once with its ancestors' keys and values as the attention
cache, and returns the logits asked for at chosen positions. `prompt_cache` does the same for a
batch of prompts about to be sampled from and returns their cache laid out as `generate` lays
out the batch (left-padded), so that each distinct prompt, and each prefix the prompts share, is
encoded once however many completions are drawn from it.

Why hand-written: transformers' `generate` shares a prompt's cache only along one sequence, and
the serving engines that share prefix trees (vLLM, SGLang) do not run here. The cache of a node
is its own tokens' keys and values; a batch's past is its rows' ancestor chains, left-padded, with
a 4-D mask that hides the padding; siblings share a row (each masked to the chain and its own
tokens), so a prompt followed by many answers lays the prompt's cache out once. Nodes are encoded deepest
first and freed once their whole subtree is done, so memory stays near a batch of chains, not the whole tree;
a batch holds nodes of similar length, so padding wastes little.

Only for decoder-only models whose logits are `lm_head(final hidden state)` over full attention
(Llama, Qwen2, Mistral, ...); `supports(model)` says whether a model qualifies, and callers fall
back to plain re-encoding otherwise. Results equal re-encoding to float rounding (tests check
1e-5 in log-probability).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Sequence


@dataclass(eq=False)
class _Node:
    tokens: list[int]
    start: int  # position of its first token in every sequence through it
    parent: "_Node | None"
    children: list["_Node"] = field(default_factory=list)
    wanted: dict[int, list] = field(default_factory=dict)  # local position -> requests
    kv: object = None  # [layers, 2, kv heads, len(tokens), head dim] once encoded
    pending: int = 0  # children whose subtrees are not done

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)


def unwrapped(model):
    """The transformers model under a PEFT wrapper whose adapters are injected into its layers (LoRA
    and its kin: the wrapped model computes what the wrapper computes), else `model` itself. Prompt
    learning (virtual tokens the wrapper adds) and aLoRA (offsets the wrapper's hooks set) live in
    the wrapper, so those stay wrapped, and `supports` refuses them."""
    inner = getattr(model, "get_base_model", None)
    if not callable(inner):
        return model
    config = getattr(model, "active_peft_config", None)
    if config is None or getattr(config, "is_prompt_learning", False) or getattr(
        config, "alora_invocation_tokens", None
    ):
        return model
    return inner()


def supports(model) -> bool:
    """Whether `prefix_logits` can run `model` (see module doc)."""
    if callable(getattr(model, "get_base_model", None)) and unwrapped(model) is model:
        return False  # a PEFT wrapper that does its own work around the model's layers
    model = unwrapped(model)
    config = getattr(model, "config", None)
    base = getattr(model, "base_model", None)
    if config is None or base is None or base is model or model.get_output_embeddings() is None:
        return False
    if getattr(config, "is_encoder_decoder", False) or getattr(config, "final_logit_softcapping", None):
        return False
    if any(kind != "full_attention" for kind in (getattr(config, "layer_types", None) or ())):
        return False
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return False
    return _cache_argument(base) is not None


def _cache_argument(module) -> str | None:
    names = inspect.signature(unwrapped(module).forward).parameters
    return next((n for n in ("cache", "past_key_values") if n in names), None)


def build_tree(sequences: Sequence[Sequence[int]]) -> tuple[_Node, list[list[_Node]]]:
    """The compressed prefix tree of `sequences` (an empty root) and each sequence's node path."""
    root = _Node([], 0, None)
    paths: list[list[_Node]] = [[] for _ in sequences]
    stack = [(root, list(range(len(sequences))))]
    while stack:
        parent, members = stack.pop()
        branches: dict[int, list[int]] = {}
        for i in members:
            if len(sequences[i]) > parent.end:
                branches.setdefault(sequences[i][parent.end], []).append(i)
        for group in branches.values():
            first, end = sequences[group[0]], parent.end + 1
            while end < len(first) and all(
                len(sequences[i]) > end and sequences[i][end] == first[end] for i in group
            ):
                end += 1
            node = _Node(list(first[parent.end:end]), parent.end, parent)
            parent.children.append(node)
            for i in group:
                paths[i].append(node)
            stack.append((node, group))
    return root, paths


def prefix_logits(model, sequences: Sequence[Sequence[int]], positions: Sequence[Sequence[int]], visit,
                  batch_size: int = 64) -> int:
    """Encode `sequences` once per distinct prefix and call `visit(position, logits, requests)` for
    every distinct (prefix, position) asked for: `positions[i]` lists positions p of sequence i
    whose next-token logits (a float32 [vocab] tensor, the logits at p) are wanted; `requests` is
    the list of (i, p) sharing that prefix. Returns the tokens encoded."""
    root, paths = build_tree(sequences)
    for i, wanted in enumerate(positions):
        for p in wanted:
            node = next(n for n in paths[i] if n.start <= p < n.end)
            node.wanted.setdefault(p - node.start, []).append((i, p))
    return _run(model, root, visit, batch_size, keep=False)


STATIC_ROOM = 1.0
"""`prompt_cache` reserves the reply's room up front only while it is at most this many times the
prompts' width (so at most doubling the cache the prompts alone take)."""


def prompt_cache(model, prompts: Sequence[Sequence[int]], room: int, batch_size: int = 64,
                 rows: Sequence[int] | None = None):
    """(the attention cache of `prompts`, left-padded to the longest, as `generate` lays a batch
    out; the tokens encoded). Shared prefixes are encoded once. `rows` lists, for each row of the
    cache, the prompt it holds (default: one row per prompt). The cache is a `StaticCache` with
    `room` positions after the prompts for the reply, filled once: a `DynamicCache` grows by concatenation,
    so every new token copies the whole cache into freshly allocated memory, which for 256 rows of
    a 300-token prompt on SmolLM2 is 3.5 GB a step (4-5 s of page faults and copying where the
    step's arithmetic takes about 1 s). Preallocating is bounded: where `room` exceeds
    `STATIC_ROOM` times the prompts' width (long replies allowed after short prompts, e.g. a
    4,096-token limit), reserving it for every row up front could take far more memory than the
    replies ever use, so the cache is a `DynamicCache` of the prompts alone and grows as before."""
    import torch
    from transformers import DynamicCache, StaticCache

    root, paths = build_tree(prompts)
    encoded = _run(model, root, None, batch_size, keep=True)
    width = max(len(p) for p in prompts)
    rows = list(range(len(prompts))) if rows is None else list(rows)
    chains = [[node.kv for node in path] for path in paths]
    layers, _, heads, _, dim = chains[0][0].shape
    sample = chains[0][0]
    static = room <= STATIC_ROOM * width
    stacked = torch.zeros(
        (layers, 2, len(rows), heads, width + (room if static else 0), dim),
        dtype=sample.dtype,
        device=sample.device,
    )
    for prompt, chain, where in zip(prompts, chains, _rows_of(rows, len(prompts))):
        if not where:
            continue
        at = width - len(prompt)
        for kv in chain:
            stacked[:, :, where, :, at : at + kv.shape[3]] = kv[:, :, None]
            at += kv.shape[3]
    if not static:
        return DynamicCache(
            ddp_cache_data=[(stacked[layer, 0], stacked[layer, 1]) for layer in range(layers)]
        ), encoded
    cache = StaticCache(config=model.config, max_cache_len=width + room)
    for layer, (keys, values) in zip(cache.layers, ((stacked[i, 0], stacked[i, 1]) for i in range(layers))):
        # Filled in place of `lazy_initialization`, which would also import torch._dynamo to mark
        # the tensors for compilation (seconds, and nothing here is compiled).
        layer.keys, layer.values, layer.device = keys, values, keys.device
        layer.batch_size, layer.num_heads, layer.k_head_dim, layer.v_head_dim = len(rows), heads, dim, dim
        layer.cumulative_length = torch.tensor(width, dtype=torch.long, device=keys.device)
        layer.is_initialized = True
    return cache, encoded


def _rows_of(rows: list[int], prompts: int) -> list[list[int]]:
    where: list[list[int]] = [[] for _ in range(prompts)]
    for row, prompt in enumerate(rows):
        where[prompt].append(row)
    return where


def _run(model, root: _Node, visit, batch_size: int, keep: bool) -> int:
    """Encode every node of the tree under `root`, deepest ready nodes first, `batch_size` a batch;
    hand wanted logits to `visit`; free each subtree's caches when it is done unless `keep`."""
    model = unwrapped(model)
    base, head = model.base_model, model.get_output_embeddings()
    cache_name = _cache_argument(base)
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    ready = list(root.children)
    root.pending = len(root.children)
    encoded = 0
    while ready:
        ready.sort(key=lambda n: n.start)
        size = _width_class(ready[-1])
        batch = [n for n in reversed(ready) if _width_class(n) == size][:batch_size]
        taken = set(map(id, batch))
        ready = [n for n in ready if id(n) not in taken]
        encoded += sum(len(n.tokens) for n in batch)
        hidden = _encode(base, cache_name, batch, device, dtype)
        for row, node in enumerate(batch):
            if node.wanted:
                local = sorted(node.wanted)
                logits = head(hidden[row][local]).float()
                for k, q in enumerate(local):
                    visit(node.start + q, logits[k], node.wanted[q])
            node.pending = len(node.children)
            ready.extend(node.children)
            if not node.children and not keep:
                _release(node)
        del hidden
    return encoded


def _width_class(node: _Node) -> int:
    """Nodes batched together have lengths within a factor of 2, so padding at most doubles a
    batch's tokens (the tail of a prompt and its one-token answers would otherwise share a batch)."""
    return max(0, len(node.tokens) - 1).bit_length()


def _release(node: _Node) -> None:
    """A node's subtree is done: drop its cache, and its parent's when that was the last child."""
    while node is not None and node.pending == 0:
        node.kv = None
        node = node.parent
        if node is not None:
            node.pending -= 1


ROW_TOKENS = 256
"""Siblings packed into one row hold at most this many tokens together (or one node, if longer):
attention inside a row costs its width squared, masked or not, so a row of many long siblings
would cost more than laying their parent's cache out once per sibling."""


def _rows(batch: list[_Node]) -> list[list[_Node]]:
    """`batch` as rows: siblings (one parent, so one ancestor chain) share a row up to `ROW_TOKENS`."""
    by_parent: dict[int, list[_Node]] = {}
    for node in batch:
        by_parent.setdefault(id(node.parent), []).append(node)
    rows: list[list[_Node]] = []
    for siblings in by_parent.values():
        row: list[_Node] = []
        for node in siblings:
            if row and sum(len(n.tokens) for n in row) + len(node.tokens) > ROW_TOKENS:
                rows.append(row)
                row = []
            row.append(node)
        rows.append(row)
    return rows


def _encode(base, cache_name: str, batch: list[_Node], device, dtype) -> list:
    """Run `batch`'s nodes over their ancestors' caches; store each node's own keys and values;
    return each node's final hidden states [len(tokens), hidden], in `batch`'s order.

    Siblings share a row (tree attention): each attends to the common chain and to its own tokens
    only, with its own positions, so the chain's cache is laid out once per row instead of once
    per node. Scoring 32 answers after one prompt used to copy the prompt's keys and values 32
    times (then expand and concatenate them again inside attention), which cost several times
    the arithmetic of the tokens themselves. Rows are right-padded; their chains left-padded."""
    import torch
    from transformers import DynamicCache

    rows = _rows(batch)
    chains = []
    for row in rows:
        chain, up = [], row[0].parent
        while up is not None and up.tokens:
            chain.append(up.kv)
            up = up.parent
        chains.append(chain[::-1])
    past = max(row[0].start for row in rows)
    width = max(sum(len(n.tokens) for n in row) for row in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    allowed = torch.zeros((len(rows), width, past + width), dtype=torch.bool)
    spans: dict[int, tuple[int, int, int]] = {}  # node -> (row, first column, length)
    for r, row in enumerate(rows):
        allowed[r, :, past - row[0].start : past] = True  # the chain, for every token of the row
        at = 0
        for node in row:
            n = len(node.tokens)
            ids[r, at : at + n] = torch.tensor(node.tokens, dtype=torch.long)
            positions[r, at : at + n] = node.start + torch.arange(n)
            allowed[r, at : at + n, past + at : past + at + n] = torch.ones((n, n), dtype=torch.bool).tril()
            spans[id(node)] = (r, at, n)
            at += n
        for j in range(at, width):  # padding attends to itself, so no row of the mask is empty
            allowed[r, j, past + j] = True
    mask = torch.zeros((len(rows), 1, width, past + width), dtype=dtype)
    mask.masked_fill_(~allowed[:, None], torch.finfo(dtype).min)
    if past:
        sample = next(kv for chain in chains for kv in chain)
        layers, _, heads, _, dim = sample.shape
        stacked = torch.zeros(
            (layers, 2, len(rows), heads, past, dim), dtype=sample.dtype, device=sample.device
        )
        for r, (row, chain) in enumerate(zip(rows, chains)):
            at = past - row[0].start
            for kv in chain:
                stacked[:, :, r, :, at : at + kv.shape[3]] = kv
                at += kv.shape[3]
        cache = DynamicCache(
            ddp_cache_data=[(stacked[layer, 0], stacked[layer, 1]) for layer in range(layers)]
        )
    else:
        cache = DynamicCache()
    out = base(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
               use_cache=True, **{cache_name: cache})
    cache = getattr(out, cache_name, None) or out.past_key_values
    own = torch.stack(
        [torch.stack([layer.keys[:, :, past:], layer.values[:, :, past:]]) for layer in cache.layers]
    )
    hidden = []
    for node in batch:
        r, at, n = spans[id(node)]
        node.kv = own[:, :, r, :, at : at + n].clone()
        hidden.append(out.last_hidden_state[r, at : at + n])
    return hidden
