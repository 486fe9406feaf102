"""pagerank: PageRank of a Barabasi-Albert graph with networkx (SeBS
`graph-pagerank`, TOSS / PASS `pagerank`; those use igraph, not packaged for this
runtime, networkx is)."""
import networkx as nx


def init():
    import scipy.sparse  # noqa: F401  (nx.pagerank's backend)


def handler(event):
    n, m, seed = int(event["nodes"]), int(event["m"]), int(event["seed"])
    g = nx.barabasi_albert_graph(n, m, seed=seed)
    pr = nx.pagerank(g, alpha=0.85, tol=1e-10, max_iter=200)
    top = sorted(pr.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    return {
        "nodes": g.number_of_nodes(),
        "edges": g.number_of_edges(),
        "sum": float(sum(pr.values())),
        "top": [[int(k), float(v)] for k, v in top],
    }
