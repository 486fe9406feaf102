"""TEST ONLY: a function that never returns unless interrupted (timeout tests)."""


def handler(event):
    x = 0
    while True:
        x += 1
