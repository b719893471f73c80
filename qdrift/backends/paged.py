"""A paged KV cache whose every read verifies that each page still belongs to the request reading it.

Keys and values live in a page pool shared by all rows (requests); each row has a page table, and
the table is shared by all layers (one physical page holds a token range of every layer, as in
vLLM's block tables). Every physical page carries a tag (owner row, page sequence number within
the owner, allocation generation); each row records the tags it expects. Every layer's read first
compares the expected tags of all live rows with the pool's tags, one small integer tensor
comparison, and raises a PageIntegrityError naming the row, the page and both tags on a mismatch.
A row that failed the check is aborted and writes nothing from then on: its page table may point
into another row's pages, and a write through it would change that healthy row's tokens.

The tags check page ownership (which row's table may point at a page), not page contents: a bit
flipped inside a page's keys or values, or a write through a correct table by wrong code, passes.

Why not transformers' PagedAttentionCache: it belongs to continuous batching (`generate_batch`),
where the scheduler owns requests and the attention kernel reads the pages through its own block
tables; BatchSession drives the model one forward at a time over a standard `Cache`, so a cache
layer is the seam where a read can be checked and a single row aborted.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

FAULTS = ("reassign", "swap", "stale_generation", "reuse_without_bump", "alias")


class PageIntegrityError(RuntimeError):
    def __init__(self, row: int, page_index: int, physical: int, expected: tuple, found: tuple):
        self.row, self.page_index, self.physical = row, page_index, physical
        super().__init__(
            f"KV page integrity violated for request {row}: its page {page_index} (physical page {physical}) "
            f"should carry tag (owner, seq, generation) = {expected}, found {found}"
        )


class PagePool:
    """Page tables, tags and the allocator shared by all layers of one PagedCache."""

    def __init__(self, batch: int, page_size: int, device: torch.device, check: bool = True):
        self.batch, self.page_size, self.device, self.check = batch, page_size, device, check
        self.tags = torch.zeros(0, 3, dtype=torch.long, device=device)  # per physical page
        self.table = torch.zeros(batch, 0, dtype=torch.long, device=device)  # row -> physical pages
        self.expected = torch.zeros(batch, 0, 3, dtype=torch.long, device=device)
        self.free: list[int] = []
        self.length = 0  # tokens per row (BatchSession pads every row to the same length)
        self.skip = torch.zeros(batch, dtype=torch.bool, device=device)  # aborted rows: never verified
        self.writers: torch.Tensor | None = None  # rows that write this forward (None: all)

    @property
    def n_pages(self) -> int:
        return self.table.shape[1]

    def reserve(self, new_length: int) -> None:
        """Allocate pages so every row can hold `new_length` tokens (called once per forward)."""
        need = -(-new_length // self.page_size)
        for idx in range(self.n_pages, need):
            pages = [self._allocate() for _ in range(self.batch)]
            col = torch.tensor(pages, device=self.device)
            tag = torch.stack([torch.arange(self.batch, device=self.device),
                               torch.full((self.batch,), idx, device=self.device), self.tags[col, 2] + 1], dim=1)
            self.tags[col] = tag
            self.table = torch.cat([self.table, col[:, None]], dim=1)
            self.expected = torch.cat([self.expected, tag[:, None]], dim=1)

    def _allocate(self) -> int:
        if self.free:
            return self.free.pop()
        self.tags = torch.cat([self.tags, torch.zeros(1, 3, dtype=torch.long, device=self.device)])
        return self.tags.shape[0] - 1

    def verify(self) -> None:
        """Raise PageIntegrityError for the first live row whose pages do not carry the expected tags."""
        if not self.check or self.n_pages == 0:
            return
        found = self.tags[self.table]  # [B, pages, 3]
        if torch.equal(found, self.expected):  # the common case in one comparison, before locating a fault
            return
        bad = (found != self.expected).any(-1) & ~self.skip[:, None]  # [B, pages]
        if bool(bad.any()):
            row, idx = (int(i) for i in bad.nonzero()[0])
            phys = int(self.table[row, idx])
            raise PageIntegrityError(row, idx, phys, tuple(self.expected[row, idx].tolist()),
                                     tuple(self.tags[phys].tolist()))

    # --- fault injection (tests and drills) ------------------------------------------------------
    def inject(self, kind: str, row: int, page_index: int = 0, other: int | None = None) -> None:
        """Corrupt the pool as an allocator or page-table bug would.

        reassign: the allocator hands `row`'s page to `other` (which writes its tag there);
        swap: `row` and `other` exchange that page-table entry;
        stale_generation: the page was freed and reallocated (generation bumped) while `row` still points to it;
        reuse_without_bump: freed and given to `other` without bumping the generation;
        alias: `row`'s page-table entry points at `other`'s page of the same index (tags untouched), so
        `row`'s later writes would land in `other`'s page.
        """
        if kind not in FAULTS:
            raise ValueError(f"unknown fault {kind!r}. Valid: {', '.join(FAULTS)}")
        phys = int(self.table[row, page_index])
        if kind in ("reassign", "reuse_without_bump", "swap", "alias") and other is None:
            raise ValueError(f"fault {kind!r} needs `other`, the row the page goes to")
        if kind == "reassign":
            self.tags[phys] = torch.tensor([other, page_index, int(self.tags[phys, 2]) + 1])
        elif kind == "reuse_without_bump":
            self.tags[phys] = torch.tensor([other, page_index, int(self.tags[phys, 2])])
        elif kind == "stale_generation":
            self.tags[phys, 2] += 1
        elif kind == "alias":
            self.table[row, page_index] = self.table[other, page_index]
        else:
            a, b = self.table[row, page_index].clone(), self.table[other, page_index].clone()
            self.table[row, page_index], self.table[other, page_index] = b, a


class PagedLayer(DynamicLayer):
    """One layer's keys and values in pages [n_physical, page_size, heads, dim], read through the shared tables."""

    def __init__(self, pool: PagePool, first: bool, last: bool):
        super().__init__()
        self.pool, self.first, self.last = pool, first, last
        self.k_pages = self.v_pages = None

    def update(self, key_states, value_states, *args, **kwargs):
        pool = self.pool
        if self.first:
            pool.reserve(pool.length + key_states.shape[-2])
            # Once per forward, before any layer writes or reads: the tables and tags are shared by
            # every layer and change only between forwards, so a fault aborts its row with nothing written.
            pool.verify()
            # aborted rows write nothing: their tables may point into live rows' pages (once per forward)
            pool.writers = (~pool.skip).nonzero().squeeze(1) if bool(pool.skip.any()) else None
        if self.k_pages is None:
            self.is_initialized, self.device = True, key_states.device
            self.k_pages = key_states.new_zeros(0, pool.page_size, *key_states.shape[1:2], key_states.shape[-1])
            self.v_pages = value_states.new_zeros(0, pool.page_size, *value_states.shape[1:2], value_states.shape[-1])
        grow = pool.tags.shape[0] - self.k_pages.shape[0]
        if grow > 0:
            self.k_pages = torch.cat([self.k_pages, self.k_pages.new_zeros(grow, *self.k_pages.shape[1:])])
            self.v_pages = torch.cat([self.v_pages, self.v_pages.new_zeros(grow, *self.v_pages.shape[1:])])
        start, t = pool.length, key_states.shape[-2]
        pos = torch.arange(start, start + t, device=key_states.device)
        phys = pool.table[:, pos // pool.page_size]  # [B, T]
        slot = (pos % pool.page_size).expand_as(phys)
        k_new, v_new = key_states.transpose(1, 2), value_states.transpose(1, 2)
        if pool.writers is not None:
            w = pool.writers
            phys, slot, k_new, v_new = phys[w], slot[w], k_new[w], v_new[w]
        self.k_pages[phys, slot] = k_new
        self.v_pages[phys, slot] = v_new
        end = start + t
        keys = self.k_pages[pool.table].flatten(1, 2)[:, :end].transpose(1, 2)
        values = self.v_pages[pool.table].flatten(1, 2)[:, :end].transpose(1, 2)
        if self.last:
            pool.length = end
        return keys, values

    def get_seq_length(self) -> int:
        return self.pool.length


class PagedCache(Cache):
    """A transformers Cache over one PagePool (the last layer advances the pool's length)."""

    def __init__(self, num_layers: int, batch: int, device: torch.device, page_size: int = 16, check: bool = True):
        self.pool = PagePool(batch, page_size, device, check)
        super().__init__(layers=[PagedLayer(self.pool, i == 0, i == num_layers - 1) for i in range(num_layers)])
