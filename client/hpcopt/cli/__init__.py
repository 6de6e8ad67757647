"""``hpcopt``: submit and watch campaigns from the shell (over gRPC).

The server address and token come from ``--server``/``--token`` (or ``--server-file``, a
connection file: ``hpcopt.core.serverfile``) or ``HPCOPT_SERVER`` /
``HPCOPT_TOKEN``; like ``--json`` they go before or after the command. Text is tables
that fit the terminal without splitting a value; ``--json`` prints the same records
typed, and errors as ``{"error": {...}}``. Exit status: 0 done, 1 the server refused
(not found, wrong state), 2 a problem with what was given (a file, an address, a
token), 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpcopt.cli.util import HelpFormatter, finish
from hpcopt.client import DEFAULT_SERVER, Client
from hpcopt.errors import ApiError, Error, SpecError

#: Server answers that mean "what you gave is wrong" (exit 2) rather than "no" (exit 1).
USAGE_CODES = ("INVALID_ARGUMENT", "UNAVAILABLE", "UNAUTHENTICATED", "PERMISSION_DENIED")


class Usage(Error):
    """A problem with the command line or a file it names: one line, exit 2."""


def _common(top: bool) -> argparse.ArgumentParser:
    """The options every command takes. On the commands they default to SUPPRESS, so
    ``hpcopt --json list`` and ``hpcopt list --json`` both work and neither undoes the other."""
    p = argparse.ArgumentParser(add_help=False)
    unset: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}
    p.add_argument(
        "--server",
        help=f"gRPC address HOST:PORT (env HPCOPT_SERVER; else the connection file; else {DEFAULT_SERVER})",
        **unset,
    )
    p.add_argument(
        "--server-file",
        help="the connection file `hpcopt-server serve --server-file` wrote (env HPCOPT_SERVER_FILE; "
        "default ~/.hpcopt/server.json when it exists)",
        **unset,
    )
    p.add_argument("--token", help="API token (env HPCOPT_TOKEN; default: none)", **unset)
    p.add_argument("--json", action="store_true", help="print typed JSON instead of text, errors too", **unset)
    return p


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="hpcopt",
        description="Submit and watch hpcopt campaigns.",
        parents=[_common(True)],
        formatter_class=HelpFormatter,
    )
    common = [_common(False)]
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=text, description=text, parents=common, formatter_class=HelpFormatter)

    s = command("submit", "submit a campaign spec (YAML or JSON file)")
    s.add_argument("spec", type=Path, help="the spec file")
    s.add_argument("--dry-run", action="store_true", help="only validate the file")
    s.add_argument("-q", "--quiet", action="store_true", help="print only the new campaign's id")
    ls = command("list", "list campaigns, newest first")
    ls.add_argument("--limit", type=int, default=50, help="at most this many (at most 1000)")
    ls.add_argument("--offset", type=int, default=0, help="skip this many of the newest first")
    for name, text in (
        ("show", "one campaign"),
        ("best", "the best trial; of a multi-objective campaign, its Pareto front"),
        ("cancel", "cancel a running (or paused) campaign"),
        ("pause", "pause a running campaign: agents get no new trial (they wait); running trials go on"),
        ("resume", "resume a paused campaign"),
    ):
        command(name, text).add_argument("campaign", type=int, help="the campaign's id")
    b = command("budget", "raise a campaign's budget.max_trials (a completed campaign runs again)")
    b.add_argument("campaign", type=int, help="the campaign's id")
    b.add_argument("max_trials", type=int, help="the new budget.max_trials, above the present one")
    st = command("stop", "stop a queued or running trial: its agent stops at its next heartbeat")
    st.add_argument("campaign", type=int, help="the campaign's id")
    st.add_argument("number", type=int, help="the trial's number in the campaign (as tables show: #27)")
    st.add_argument("--reason", default="", help="why, kept in the trial's history")
    an = command(
        "analyse",
        "ask for a finished trial's curvature and landscape: the campaign's next agent computes them from the "
        "folds' checkpoints",
    )
    an.add_argument("campaign", type=int, help="the campaign's id")
    an.add_argument("number", type=int, help="the trial's number in the campaign (as tables show: #27)")
    t = command("trials", "the trials of a campaign by number, a page at a time")
    t.add_argument("campaign", type=int, help="the campaign's id")
    t.add_argument("--state", action="append", default=[], help="only this state (repeatable)")
    t.add_argument("--limit", type=int, default=50, help="at most this many; 0: all")
    t.add_argument("--offset", type=int, default=0, help="skip this many, from #0")
    tr = command("trial", "one trial with its folds, learning curves and history: CAMPAIGN NUMBER (#27), or --id ID")
    tr.add_argument("campaign", type=int, nargs="?", help="the campaign")
    tr.add_argument("number", type=int, nargs="?", help="the trial's number in the campaign (as tables show: #27)")
    tr.add_argument("--id", type=int, dest="trial_id", help="the trial's global id instead (as the API returns)")
    w = command("watch", "follow a campaign until it ends (Ctrl-C leaves it); line by line when not on a terminal")
    w.add_argument("campaign", type=int, help="the campaign's id")
    w.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    e = command("export", "export a campaign as JSON (re-importable)")
    e.add_argument("campaign", type=int, help="the campaign's id")
    e.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    i = command("import", "import an exported campaign as a new one")
    i.add_argument("file", type=Path, help="a file written by `hpcopt export`")
    i.add_argument("-q", "--quiet", action="store_true", help="print only the new campaign's id")
    from hpcopt.cli.plan import add_parser as add_plan

    add_plan(command)
    wt = command("wait", "wait until the server answers (after starting it in the background)")
    wt.add_argument("--timeout", type=float, default=60.0, help="give up after this many seconds")
    return finish(ap, "hpcopt")


def _wait(args: argparse.Namespace) -> str:
    """``hpcopt wait``: until the server answers, within ``--timeout`` seconds. The address
    is looked up again every few seconds, so a connection file that the server writes
    after this started (``serve --server-file &`` then ``hpcopt wait``) is found."""
    deadline = time.monotonic() + args.timeout
    while True:
        left = deadline - time.monotonic()
        try:
            with Client(args.server, args.token, server_file=args.server_file) as c:
                c.wait_ready(max(0.05, min(left, 3.0)))
                return str(c.target)
        except ApiError as exc:
            if exc.code != "UNAVAILABLE" or time.monotonic() + 0.2 >= deadline:
                if exc.code == "UNAVAILABLE":
                    raise ApiError(exc.code, _within(exc.message, args.timeout)) from None
                raise
        time.sleep(0.2)


def _within(message: str, timeout: float) -> str:
    """The last try's message, naming the whole wait rather than its last window."""
    return re.sub(r"within [0-9.e+-]+ s", f"within {timeout:g} s", message, count=1)


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    as_json = bool(getattr(args, "json", False))

    def fail(status: int, code: str, message: str, fields: list[dict[str, str]] | None = None) -> int:
        if as_json:
            from hpcopt.cli.views import error_json

            print(error_json(code, message, fields))
        else:
            print(f"hpcopt: {message}", file=sys.stderr)
            for f in fields or []:
                print(f"  {f['field']}: {f['message']}", file=sys.stderr)
        return status

    try:
        return _run(args)
    except SpecError as exc:
        fields = [{"field": f or "(document)", "message": m} for f, m in exc.errors]
        return fail(2, "INVALID_ARGUMENT", f"{args.spec} is not a valid campaign spec:", fields)
    except ApiError as exc:
        status = 2 if exc.code in USAGE_CODES else 1
        return fail(status, exc.code, f"{exc.code}: {exc.message}", exc.field_errors)
    except Usage as exc:
        return fail(2, "INVALID_ARGUMENT", str(exc))
    except BrokenPipeError:  # `hpcopt show 1 | head`: the reader left; entry() ends quietly
        raise
    except OSError as exc:
        return fail(2, "INVALID_ARGUMENT", str(exc))
    except KeyboardInterrupt:
        return 130


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except UnicodeDecodeError:
        raise Usage(f"{path} is not a text file (an export is JSON)") from None
    except json.JSONDecodeError as exc:
        raise Usage(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None


def _run(args: argparse.Namespace) -> int:
    from hpcopt.cli import views

    out = views.Output(args.json)
    if args.command == "submit" and args.dry_run:
        from hpcopt.core.specfile import load_spec_file

        spec = load_spec_file(args.spec)
        if args.json:
            out.json({"file": str(args.spec), "valid": True, "spec": spec.model_dump(mode="json")})
        else:
            print(f"{args.spec}: valid ({len(spec.space)} parameters, {spec.budget.max_trials} trials)")
        return 0
    if args.command == "plan":
        return _plan(args, out)
    if args.command == "wait":
        target = _wait(args)
        if args.json:
            out.json({"server": target, "ready": True})
        elif sys.stdout.isatty():
            print(f"the server at {target} answers")
        return 0
    with Client(args.server, args.token, server_file=args.server_file) as c:
        if args.command == "submit":
            campaign = c.create_campaign(args.spec)
            if args.quiet and not args.json:
                print(campaign.id)
            else:
                out.emit(campaign, f"campaign {campaign.id} {campaign.name!r} submitted")
        elif args.command == "list":
            page = c.campaign_page(args.offset, args.limit)
            out.campaigns(page.items)
            _more(len(page.items), page.total, args.offset, "campaigns", ", newest first")
        elif args.command == "show":
            out.campaign(c.get_campaign(args.campaign))
        elif args.command == "best":
            campaign = c.get_campaign(args.campaign)
            if len(campaign.objectives) > 1:  # the best is the Pareto front
                out.front(c.get_pareto_front(args.campaign), campaign.space)
            else:
                out.trial(c.get_best_trial(args.campaign))
        elif args.command in ("cancel", "pause", "resume"):
            steer = {"cancel": c.cancel_campaign, "pause": c.pause_campaign, "resume": c.resume_campaign}
            x = steer[args.command](args.campaign)
            out.emit(x, f"campaign {x.id} {x.state}")
        elif args.command == "budget":
            x = c.raise_budget(args.campaign, args.max_trials)
            out.emit(x, f"campaign {x.id} {x.state}, budget {x.max_trials} trials")
        elif args.command == "stop":
            t = c.stop_trial(args.campaign, args.number, args.reason)
            out.emit(t, f"trial #{t.number} of campaign {args.campaign} {t.state}: {t.error}")
        elif args.command == "analyse":
            r = c.request_analysis(c.get_trial_by_number(args.campaign, args.number).id)
            out.emit(
                r,
                f"analysis of trial #{args.number} (id {r.trial_id}) {r.state}: an agent started on campaign "
                f"{args.campaign} computes it from the folds' checkpoints" + (f" ({r.reason})" if r.reason else ""),
            )
        elif args.command == "trials":
            order = c.get_campaign(args.campaign).space
            if args.limit:
                page = c.trial_page(args.campaign, args.state, args.offset, args.limit)
                out.trials(page.items, order)
                _more(len(page.items), page.total, args.offset, "trials")
            else:
                out.trials(c.list_trials(args.campaign, args.state, args.offset), order)
        elif args.command == "trial":
            if args.trial_id is not None:
                t = c.get_trial(args.trial_id)
            elif args.campaign is not None and args.number is not None:
                t = c.get_trial_by_number(args.campaign, args.number)
            else:
                raise Usage("hpcopt trial: give CAMPAIGN NUMBER (as tables show: #27) or --id ID")
            out.trial(t)
        elif args.command == "watch":
            from hpcopt.cli.watch import watch

            return watch(c, args.campaign, args.interval, as_json=args.json)
        elif args.command == "export":
            text = json.dumps(c.export_campaign(args.campaign), indent=2)
            if args.output:
                args.output.write_text(text + "\n")
                print(f"wrote {args.output}", file=sys.stderr)
            else:
                print(text)
        elif args.command == "import":
            document = _read_json(args.file)
            if not isinstance(document, dict):
                raise Usage(
                    f"{args.file} is not an export: a JSON object is needed, it holds a {type(document).__name__}"
                )
            x = c.import_campaign(document)
            if args.quiet and not args.json:
                print(x.id)
            else:
                out.emit(x, f"imported as campaign {x.id} {x.name!r} ({x.state})")
    return 0


def _plan(args: argparse.Namespace, out: Any) -> int:
    from hpcopt.cli.plan import PlanUsage, run_plan
    from hpcopt.errors import PlanError

    clients: list[Client] = []

    def client() -> Client:
        clients.append(Client(args.server, args.token, server_file=args.server_file))
        return clients[-1]

    try:
        doc, text = run_plan(args, client)
    except (PlanUsage, PlanError) as exc:
        raise Usage(str(exc)) from None
    finally:
        for c in clients:
            c.close()
    if args.json:
        out.json(doc)
    else:
        print(text)
    if args.strict and doc.get("warning"):
        print(f"hpcopt plan --strict: {doc['warning']}", file=sys.stderr)
        return 1
    return 0


def _more(shown: int, total: int, offset: int, what: str, order: str = "") -> None:
    if offset + shown < total:
        print(f"{shown} of {total} {what} shown{order}; the next ones with --offset {offset + shown}", file=sys.stderr)


def entry() -> None:
    """The console script: exits with ``main``'s status; a closed pipe is not an error."""
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        status = 0
    sys.exit(status)
