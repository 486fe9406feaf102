"""chameleon: render an HTML table with the Chameleon page-template engine
(FunctionBench / vHive `chameleon`, PASS "render HTML table")."""
import hashlib

from chameleon import PageTemplate

TEMPLATE = (
    '<table xmlns:tal="http://xml.zope.org/namespaces/tal">'
    '<tr tal:repeat="row rows">'
    '<td tal:repeat="cell row" tal:content="cell">x</td>'
    "</tr>"
    "</table>"
)

_template = None


def init():
    # Compiling the template is the expensive part of a cold start; do it before
    # the snapshot.
    global _template
    _template = PageTemplate(TEMPLATE)
    _template(rows=[["warm"]])


def handler(event):
    rows, cols = int(event["rows"]), int(event["cols"])
    data = [["%d&%d<%d>" % (r, c, r * cols + c) for c in range(cols)] for r in range(rows)]
    html = _template(rows=data)
    probes = event.get("probes", [])
    return {
        "html_length": len(html),
        "html_sha256": hashlib.sha256(html.encode("utf-8")).hexdigest(),
        "tr": html.count("<tr>"),
        "td": html.count("<td>"),
        "head": html[:200],
        "probes": [[r, c, data[r][c]] for r, c in probes],
    }
