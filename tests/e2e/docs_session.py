"""The interpreter the python blocks of one page run in, in order, as a reader runs them.

Started by tests/e2e/test_docs_blocks.py as `python docs_session.py` with the page's folder as
its working directory. Each request on stdin is one JSON line (`source`, `path`, `line`: the
block's first line in its markdown file, `output`: a file for what the block prints, `raises`:
the name of the exception the block must raise, or null); each answer is one JSON line on the
stdout this process started with (`ok`, `error`). Blocks run in `__main__`'s namespace, so a
later block sees what an earlier one defined and functions pickle by value, as in a script.
Tracebacks name the markdown file and its line numbers.
"""

if __name__ == "__main__":

    def _serve() -> None:
        import contextlib
        import json
        import os
        import sys
        import traceback

        sys.path[0] = os.getcwd()  # as `python snippet.py` in the page's folder, not this one's
        answers = os.fdopen(os.dup(1), "w")
        namespace = sys.modules["__main__"].__dict__
        for request in sys.stdin:
            ask = json.loads(request)
            code = compile("\n" * (ask["line"] - 1) + ask["source"], ask["path"], "exec")
            sys.stdout.flush()
            sys.stderr.flush()
            saved = os.dup(1), os.dup(2)
            with open(ask["output"], "ab") as out:
                os.dup2(out.fileno(), 1)
                os.dup2(out.fileno(), 2)
                try:
                    exec(code, namespace)
                    raised = None
                except BaseException as exc:
                    raised = exc
                    # the block's frames only, not this loop's
                    tb = exc.__traceback__.tb_next if exc.__traceback__ else None
                    trace = "".join(traceback.format_exception(type(exc), exc, tb))
                finally:
                    with contextlib.suppress(Exception):
                        sys.stdout.flush()
                        sys.stderr.flush()
                    os.dup2(saved[0], 1)
                    os.dup2(saved[1], 2)
                    os.close(saved[0])
                    os.close(saved[1])
            expected = ask["raises"]
            if raised is None:
                answer = {"ok": expected is None, "error": f"did not raise {expected}"}
            elif expected and expected in {t.__name__ for t in type(raised).__mro__}:
                answer = {"ok": True, "error": "", "message": str(raised)}
            else:
                answer = {"ok": False, "error": trace}
            answers.write(json.dumps(answer) + "\n")
            answers.flush()

    _serve()
    del _serve
