"""TEST ONLY: a function whose handler raises (agent error-path tests)."""


def handler(event):
    raise ValueError("boom: %r" % (event,))
