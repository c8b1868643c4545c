"""Studies of the kit itself, above the mission's path (nothing below imports this package).

``parity/`` is ``dlperf parity``: the kit's benchmark beside a bare loop of the same model, to
show the harness's cost. ``bareloop.py`` is the command line and result line the bare loops
(``<Framework>/bare_loop.py``) share; they import it inside framework environments, so this
package stays stdlib-only at import.
"""
