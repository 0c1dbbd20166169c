"""The names torch's test helpers (torch/testing/_internal/common_utils.py)
take from the expecttest package, which Debian does not ship: ACCEPT and a
TestCase with assertExpectedInline.  Written here for the suite runner only
(dist_suite.py puts this directory on the path); it never rewrites sources,
so ACCEPT stays False and a mismatch is a failure."""
import textwrap
import unittest

ACCEPT = False


def _normalize(expect):
    # Inline expectations are written as indented triple-quoted strings.
    if expect.startswith("\n"):
        expect = expect[1:]
    return textwrap.dedent(expect)


class TestCase(unittest.TestCase):
    longMessage = True

    def assertExpectedInline(self, actual, expect, skip=0):
        self.assertIsInstance(actual, str)
        self.assertMultiLineEqual(_normalize(expect), actual)

    def assertExpectedRaisesInline(self, exc_type, callable, expect, *args, **kwargs):
        with self.assertRaises(exc_type) as ctx:
            callable(*args, **kwargs)
        self.assertExpectedInline(str(ctx.exception), expect)
