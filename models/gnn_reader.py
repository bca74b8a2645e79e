"""Query-conditioned gated message passing over a typed memory graph (a GNN reader).

The reader follows the NBFNet / graph-foundation-model recipe: node states are *not* the node
embeddings but query-specific states seeded at the entry nodes, so one forward pass scores every
node of one graph for a whole batch of queries that share it. Node states are stored channel-major,
``[H, N, B]`` (hidden, nodes, queries), so that every linear map over the hidden size is one
``[H', H] @ [H, N B]`` product and the fused aggregation reads the states as its ``[H N, B]``
table without copies; edges are shared by the batch.

* Seeding (soft addressing): ``h_{v,b}^{(0)} = s_{b,v} (W_q q_b)`` with ``s`` the start mask of
  query ``b`` (1 at its entry nodes, or any non-negative weights), a broadcast product of the
  ``[H, 1, B]`` projected queries and the ``[1, N, B]`` start weights.
* Layers: :class:`GatedRelationalConv` (formula in its docstring), ``L`` of them with residuals.
* Readout: ``score_{b,v} = w_o^T ReLU(W_h h_{v,b}^{(L)} + W_c (P_x x_v \\odot P_q q_b) + W_l φ_{b,v} + c)
  + \\kappa \\cos(x_v, q_b) + λ^T φ_{b,v}``, so a node that propagation never reaches is still ranked by its
  content match; ``φ_{b,v}`` are the lexical features of query and node text
  (:mod:`graphmem.index.lexical_features`: BM25 share of the local bound, rare-word, name, number and date
  overlap), present with ``lexical`` (``λ`` starts at 0).

Several graphs can share one pass as their disjoint union, *packed*: column ``j`` of the states
then holds one query per graph (``query_of[j, v]`` names the query of node ``v``'s graph), since
no message crosses from one graph to another.

Knows nothing of datasets or files: inputs are tensors.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Final

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric import EdgeIndex
from torch_geometric.nn import MessagePassing
from torch_geometric.utils import scatter

from graphmem.index.lexical_features import NUM_LEXICAL_FEATURES


@dataclass
class ReaderShape:
    """The part of a :class:`GNNReader`'s shape that a trainer chooses (the rest comes from the graphs).

    Args:
        hidden_dim: node state size ``H`` (default: 32).
        num_layers: message-passing layers ``L`` (default: 2).
        add_inverse: also pass messages against each edge, with its own relation ids ``r + R``
            (default: True).
    """

    hidden_dim: int = 32
    num_layers: int = 2
    add_inverse: bool = True

    def shape(self) -> dict:
        """``{hidden_dim, num_layers, add_inverse}`` of this config (or of a config extending it)."""
        return {f.name: getattr(self, f.name) for f in fields(ReaderShape)}


@dataclass
class ReaderConfig(ReaderShape):
    """Shape of a :class:`GNNReader`: :class:`ReaderShape` (``hidden_dim``, ``num_layers``,
    ``add_inverse``) and what the graphs fix.

    Args:
        input_dim: node / query embedding size ``D`` (default: 384).
        num_relations: relation types of the graph, before inverses (default: 4).
        edge_dim: edge feature size (default: 4).
        lexical: read the lexical features ``φ`` of query and node text (default: False;
            ``rl.gnn.train`` trains readers with them unless ``train.lexical=false``).
    """

    input_dim: int = 384
    num_relations: int = 4
    edge_dim: int = 4
    lexical: bool = False


class GatedRelationalConv(MessagePassing):
    r"""One layer of relation-specific, gated message passing, batched over queries.

    For an edge :math:`e = (j \to i)` of relation :math:`r_e` with features :math:`a_e`, and every
    query :math:`b` of the batch:

    .. math::
        g_e &= \sigma(\beta_{r_e} + U a_e) \in \mathbb{R}^H \\
        m_{e,b} &= g_e \odot z_{r_e} \odot h_{j,b} \\
        \bar m_{i,b} &= \frac{1}{|\mathcal{N}^-(i)|} \sum_{e=(j \to i)} m_{e,b}
            \quad (\bar m_{i,b} = 0 \text{ without in-edges}) \\
        h'_{i,b} &= h_{i,b} + \mathrm{ReLU}(W_m \bar m_{i,b} + W_s h_{i,b} + c)

    :math:`\beta_r, z_r \in \mathbb{R}^H` are learned per relation (gate bias and DistMult-style
    relation vector), :math:`U \in \mathbb{R}^{H \times d_e}` gates on the edge features
    (e.g. HAGE's ``e_ij``), and the residual keeps the seeded query signal.

    Layouts: states are channel-major, ``h: [H, N, B]``, so that :math:`W_m` and :math:`W_s` are
    ``[H, H] @ [H, N B]`` products and :meth:`message_and_aggregate` reads ``h`` as an ``[H N, B]``
    table; the edge weights :math:`g_e \odot z_{r_e}` are ``[E, H]``.
    :meth:`message_and_aggregate` computes :math:`\bar m` without materialising the messages;
    :meth:`message` and :meth:`aggregate` state the same mean edge by edge, on node-major rows
    (messages ``[E, B, H]``, ``node_dim=0``), and run for a single query or where PyG does not fuse
    the two (e.g. in explain mode).

    Args:
        hidden_dim: state size ``H``.
        num_relations: relation ids the layer accepts (inverses included).
        edge_dim: edge feature size ``d_e`` (default: 4).
    """

    SUPPORTS_FUSED_EDGE_INDEX: Final[bool] = True

    def __init__(self, hidden_dim: int, num_relations: int, edge_dim: int = 4):
        super().__init__(aggr="sum", node_dim=0)  # the 1 / |N^-(i)| of the mean is in the edge weights
        self.hidden_dim = hidden_dim
        self.relation = nn.Parameter(torch.ones(num_relations, hidden_dim))  # z_r
        self.gate_bias = nn.Parameter(torch.zeros(num_relations, hidden_dim))  # beta_r
        self.gate_edge = nn.Linear(edge_dim, hidden_dim, bias=False)  # U
        self.lin_msg = nn.Linear(hidden_dim, hidden_dim, bias=False)  # W_m
        self.lin_self = nn.Linear(hidden_dim, hidden_dim)  # W_s, c
        nn.init.normal_(self.relation, 1.0, 0.1)

    def forward(
        self, h: Tensor, edge_index: Tensor, edge_type: Tensor, edge_attr: Tensor, degree: Tensor | None = None
    ) -> Tensor:
        """``h``: ``[H, N, B]``; returns the new ``[H, N, B]`` states.

        ``degree`` ``[N]``: the in-degree ``|N^-(i)|`` of each node in the graph the edges come from
        (default: counted over ``edge_index``). A caller that passes only some of a node's in-edges
        (those whose messages are not zero, :func:`ball_scores`) gives the full count here, so the
        mean is the full graph's. Each edge's weight carries ``1 / |N^-(i)|`` and the messages are summed.

        With more than one query the edges are sorted by target into an
        :class:`~torch_geometric.EdgeIndex` (:func:`sort_by_target`, unless they come so), on
        which PyG runs :meth:`message_and_aggregate`; for a single query the ``[E, 1, H]``
        messages are cheaper than its index arithmetic, and PyG runs :meth:`message` and
        :meth:`aggregate` on the edges as given.
        """
        n = h.size(1)
        if h.size(2) > 1 and not (isinstance(edge_index, EdgeIndex) and edge_index.is_sorted_by_col):
            edge_index, edge_type, edge_attr = sort_by_target(edge_index, edge_type, edge_attr, n)
        target = edge_index[1].as_subclass(Tensor) if isinstance(edge_index, EdgeIndex) else edge_index[1]
        if degree is None:
            degree = torch.bincount(target, minlength=n)
        gate = torch.addmm(self.gate_bias.index_select(0, edge_type), edge_attr, self.gate_edge.weight.T).sigmoid_()
        weight = gate * self.relation.index_select(0, edge_type)  # [E, H]
        weight = weight / degree.index_select(0, target).to(weight.dtype).unsqueeze(1)
        return self.propagate(edge_index, h=h, weight=weight, size=(n, n))

    def message(self, h: Tensor, edge_index_j: Tensor, weight: Tensor) -> Tensor:
        """``m_{e,b} / |N^-(i)|`` with ``m_{e,b} = g_e * z_{r_e} * h_{j,b}``: ``[E, B, H]`` (``weight``
        holds ``g_e z_{r_e} / |N^-(i)|``). The sources are gathered from the node-major states
        ``[N, B, H]``, where each edge copies one contiguous row."""
        return weight.unsqueeze(1) * h.permute(1, 2, 0).contiguous().index_select(0, edge_index_j)

    def aggregate(
        self, inputs: Tensor, index: Tensor, ptr: Tensor | None = None, dim_size: int | None = None
    ) -> Tensor:
        """The sum of the degree-weighted messages per target (the mean message), channel-major: ``[H, N, B]``."""
        return scatter(inputs, index, dim=0, dim_size=dim_size, reduce="sum").permute(2, 0, 1)

    def message_and_aggregate(self, edge_index: EdgeIndex, h: Tensor, weight: Tensor) -> Tensor:
        """The mean messages ``[H, N, B]`` of :meth:`message` and :meth:`aggregate`, without the
        ``[E, B, H]`` messages: for each channel ``c`` and target ``i``, a bag-sum of the source
        states ``h_{c,j,:}`` (row ``c N + j`` of ``h`` viewed as ``[H N, B]``) weighted by
        ``g_{e,c} z_{r_e,c} / |N^-(i)|`` (an empty bag is 0)."""
        (colptr, src), _ = edge_index.get_csc()
        hid, n, bsz = h.shape
        # int32 row and bag ids where they fit: half the index memory, and a faster backward sort
        index_dtype = torch.int32 if hid * max(n, src.numel()) < 2**31 else torch.int64
        channel = torch.arange(hid, device=h.device, dtype=index_dtype).unsqueeze(1)  # [H, 1]
        out = F.embedding_bag(
            (src.to(index_dtype) + channel * n).flatten(),  # row c * N + j of the table
            h.reshape(hid * n, bsz),  # row c * N + j: h_{c,j,:}
            (colptr[:-1].to(index_dtype) + channel * src.numel()).flatten(),  # bag c * N + i: the in-edges of i
            mode="sum",
            per_sample_weights=weight.T.flatten(),
        )
        return out.view(hid, n, bsz)

    def update(self, aggr_out: Tensor, h: Tensor) -> Tensor:
        """``h + ReLU(W_m mbar + W_s h + c)``, the linear maps as ``[H, H] @ [H, N B]`` products
        (accumulated and rectified in place: no gradient needs the overwritten values)."""
        pre = torch.addmm(self.lin_self.bias.unsqueeze(1), self.lin_self.weight, h.reshape(self.hidden_dim, -1))
        pre.addmm_(self.lin_msg.weight, aggr_out.reshape(self.hidden_dim, -1))
        return h + pre.relu_().view_as(h)


def sort_by_target(
    edge_index: Tensor, edge_type: Tensor, edge_attr: Tensor, num_nodes: int
) -> tuple[EdgeIndex, Tensor, Tensor]:
    """The edges as an :class:`~torch_geometric.EdgeIndex` sorted by target (column), with their
    types and features in the same order: what :meth:`GatedRelationalConv.message_and_aggregate`
    runs on. Sorting once lets all layers share the edges and their cached CSC index."""
    edge_index, perm = EdgeIndex(edge_index, sparse_size=(num_nodes, num_nodes)).sort_by("col")
    if perm is None:
        return edge_index, edge_type, edge_attr
    return edge_index, edge_type[perm], edge_attr[perm]


class GNNReader(nn.Module):
    """Scores every node of one graph for a batch of queries (see module docstring).

    Args:
        config: a :class:`ReaderConfig`.
    """

    def __init__(self, config: ReaderConfig | None = None, **overrides):
        super().__init__()
        cfg = config or ReaderConfig()
        if overrides:
            cfg = ReaderConfig(**{**asdict(cfg), **overrides})
        self.config = cfg
        d, h = cfg.input_dim, cfg.hidden_dim
        rel = cfg.num_relations * (2 if cfg.add_inverse else 1)
        self.query_proj = nn.Linear(d, h)  # W_q
        self.layers = nn.ModuleList(GatedRelationalConv(h, rel, cfg.edge_dim) for _ in range(cfg.num_layers))
        self.node_content = nn.Linear(d, h, bias=False)  # P_x
        self.query_content = nn.Linear(d, h, bias=False)  # P_q
        self.read_state = nn.Linear(h, h)  # W_h, c
        self.read_content = nn.Linear(h, h, bias=False)  # W_c
        self.read_out = nn.Linear(h, 1, bias=False)  # w_o
        self.cosine_weight = nn.Parameter(torch.tensor(5.0))  # kappa
        if cfg.lexical:
            self.read_lexical = nn.Linear(NUM_LEXICAL_FEATURES, h, bias=False)  # W_l
            self.lexical_weight = nn.Parameter(torch.zeros(NUM_LEXICAL_FEATURES))  # λ

    # ------------------------------------------------------------------ pieces
    def seed(self, query: Tensor, start: Tensor, query_of: Tensor | None = None) -> Tensor:
        """``h^(0) [H, N, B]`` (channel-major) from queries ``[B, D]`` and start weights ``[B, N]``
        (packed: queries ``[Q, D]``, ``query_of`` ``[B, N]``)."""
        projected = torch.addmm(self.query_proj.bias.unsqueeze(1), self.query_proj.weight, query.T)  # [H, B]
        return _per_node(projected, query_of) * start.T.contiguous().unsqueeze(0)

    @staticmethod
    def cosine(x: Tensor, query: Tensor) -> Tensor:
        """``[N, B]`` ``cos(x_v, q_b)`` of the readout."""
        return F.normalize(x, dim=-1) @ F.normalize(query, dim=-1).T

    def relational_edges(
        self, edge_index: Tensor, edge_type: Tensor, edge_attr: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Append inverse edges ``(i -> j, r + R)`` when ``add_inverse`` is set."""
        if not self.config.add_inverse:
            return edge_index, edge_type, edge_attr
        r = self.config.num_relations
        return (
            torch.cat([edge_index, edge_index.flip(0)], 1),
            torch.cat([edge_type, edge_type + r]),
            torch.cat([edge_attr, edge_attr]),
        )

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        edge_type: Tensor,
        edge_attr: Tensor,
        query: Tensor,
        start: Tensor,
        query_of: Tensor | None = None,
        cosine: Tensor | None = None,
        lexical: Tensor | None = None,
    ) -> Tensor:
        """Scores ``[B, N]``.

        Args:
            x: ``[N, D]`` node embeddings.
            edge_index, edge_type, edge_attr: the graph's edges (``[2, E]``, ``[E]``, ``[E, d_e]``).
            query: ``[B, D]`` query embeddings (packed: ``[Q, D]``, all queries).
            start: ``[B, N]`` start weights (1 at each query's entry nodes).
            query_of: packed layout only: ``[B, N]`` row of ``query`` that column ``b`` holds at node ``v``.
            cosine: packed layout only: ``[N, B]`` :meth:`cosine` of each node and the query it holds.
            lexical: ``[B, N, F]`` lexical features ``φ`` (:func:`graphmem.index.lexical_features.dense_features`;
                packed: of each node and the query column ``b`` holds there); required with ``config.lexical``.
        """
        if (query_of is None) != (cosine is None):
            raise ValueError("GNNReader: the packed layout needs both `query_of` and `cosine`")
        if self.config.lexical and lexical is None:
            raise ValueError("GNNReader(lexical=True) needs the lexical features of its queries and nodes")
        query = query.to(x.dtype)
        edge_index, edge_type, edge_attr = self.relational_edges(edge_index, edge_type, edge_attr.to(x.dtype))
        if start.size(0) > 1:  # the fused aggregation runs on target-sorted edges: sort once for all layers
            edge_index, edge_type, edge_attr = sort_by_target(edge_index, edge_type, edge_attr, x.size(0))
        h = self.seed(query, start.to(x.dtype), query_of)  # [H, N, B]
        for layer in self.layers:
            h = layer(h, edge_index, edge_type, edge_attr)
        return self.readout(h, x, query, query_of, cosine, lexical)

    def readout(
        self,
        h: Tensor,
        x: Tensor,
        query: Tensor,
        query_of: Tensor | None = None,
        cosine: Tensor | None = None,
        lexical: Tensor | None = None,
    ) -> Tensor:
        """Scores ``[B, N]`` from the final states ``h`` ``[H, N, B]`` of nodes ``x`` ``[N, D]`` (the
        readout of the module docstring; ``query_of``, ``cosine`` and ``lexical`` as in :meth:`forward`)."""
        hid = h.size(0)
        content = (self.node_content.weight @ x.T).unsqueeze(2) * _per_node(
            self.query_content.weight @ query.T, query_of
        )
        hidden = torch.addmm(self.read_state.bias.unsqueeze(1), self.read_state.weight, h.reshape(hid, -1))  # W_h h + c
        hidden.addmm_(self.read_content.weight, content.reshape(hid, -1))
        phi = None
        if self.config.lexical:
            phi = lexical.to(x.dtype).permute(2, 1, 0)  # [F, N, B]
            hidden.addmm_(self.read_lexical.weight, phi.reshape(phi.size(0), -1))
        hidden.relu_()  # [H, N B]
        if query_of is None:
            cosine = self.cosine(x, query)  # [N, B]
        out = (self.read_out.weight @ hidden).view_as(cosine) + self.cosine_weight * cosine
        if phi is not None:
            out = out + torch.einsum("f,fnb->nb", self.lexical_weight, phi)
        return out.T

    def score_graph(self, graph, query: Tensor, entries: list[list[int]], lexical: Tensor | None = None) -> Tensor:
        """Scores ``[B, N]`` for a :class:`~graphmem.core.graph.MemoryGraph`-like object (duck-typed)."""
        start = start_mask(entries, graph.num_nodes, dtype=graph.embeddings.dtype)
        ei, et, ea = graph.edge_index, graph.edge_type, graph.edge_attr
        return self(graph.embeddings, ei, et, ea, query, start, lexical=lexical)

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self) -> dict:
        """A dict of plain values and tensors (what a ``"gnn"`` checkpoint holds): config fields and the state dict."""
        return {
            "config": asdict(self.config),
            "state_dict": {k: v.detach().clone() for k, v in self.state_dict().items()},
        }

    @classmethod
    def from_checkpoint(cls, state: dict) -> GNNReader:
        """Rebuild from :meth:`checkpoint` output (or a loaded checkpoint holding it; the file is read by
        :func:`graphmem.policies.gnn.load_reader`)."""
        reader = cls(ReaderConfig(**state["config"]))
        reader.load_state_dict(state["state_dict"])
        return reader


def _per_node(per_query: Tensor, query_of: Tensor | None) -> Tensor:
    """``[H, 1, B]`` from ``[H, B]`` per-query columns, or with a packed ``query_of`` ``[B, N]``,
    ``[H, N, B]`` holding at ``(v, b)`` the column of query ``query_of[b, v]``."""
    if query_of is None:
        return per_query.unsqueeze(1)
    return per_query.index_select(1, query_of.T.reshape(-1)).view(per_query.size(0), *query_of.T.shape)


def start_mask(
    entries: list[list[int]], num_nodes: int, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> Tensor:
    """``[B, N]`` with 1 at each query's entry rows, on ``device``."""
    mask = torch.zeros(len(entries), num_nodes, dtype=dtype, device=device)
    queries = torch.tensor([b for b, rows in enumerate(entries) for _ in rows], dtype=torch.long, device=device)
    mask[queries, torch.tensor([v for rows in entries for v in rows], dtype=torch.long, device=device)] = 1.0
    return mask


def ball_scores(
    reader: GNNReader,
    x: Tensor,
    edge_type: Tensor,
    edge_attr: Tensor,
    query: Tensor,
    sub,
    lexical: Tensor | None = None,
) -> Tensor:
    """Scores of the targets of ``sub`` (:class:`~graphmem.policies.subgraph.LayeredSubgraphs`, built for
    ``reader.config.num_layers`` layers and its ``add_inverse``), equal to the full-graph pass up to float
    summation order: one packed pass, one column, each node holding its part's query.

    ``x`` ``[N, D]``, ``edge_type`` ``[E]`` and ``edge_attr`` ``[E, d_e]`` are the whole graph's (only the rows
    ``sub`` names are read), on the device of ``query`` ``[B, D]``. Layer ``l`` runs on the edges of
    ``sub.layers[l - 1]`` with each node's full in-degree (``sub.degree``): the states it writes at the nodes
    of ``S_l`` are their full-graph states, and the readout reads the targets only. ``lexical`` ``[T, F]``:
    the lexical features ``φ`` of each target's query and node (required with ``config.lexical``)."""
    if len(sub.layers) != reader.config.num_layers:
        raise ValueError(
            f"ball_scores: the parts are built for {len(sub.layers)} layers, the reader has {reader.config.num_layers}"
        )
    q = query.to(x.dtype)
    h = reader.seed(q, sub.seed.to(x.dtype)[None], sub.query[None])  # [H, M, 1]
    for layer, (edge_index, edge, inverse) in zip(reader.layers, sub.layers):
        relation = edge_type.index_select(0, edge) + inverse.long() * reader.config.num_relations
        h = layer(h, edge_index, relation, edge_attr.index_select(0, edge).to(x.dtype), degree=sub.degree)
    owner = sub.query.index_select(0, sub.target)
    xt = x.index_select(0, sub.node.index_select(0, sub.target))
    cosine = (F.normalize(xt, dim=-1) * F.normalize(q, dim=-1).index_select(0, owner)).sum(1, keepdim=True)  # [T, 1]
    phi = None if lexical is None else lexical.to(x.device)[None]  # [1, T, F]: the packed layout's one column
    return reader.readout(h.index_select(1, sub.target), xt, q, owner[None], cosine, phi)[0]
