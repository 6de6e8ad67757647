"""``hpcopt``: submit and watch campaigns from the shell (over gRPC).

The server address and token come from ``--server``/``--token`` or ``HPCOPT_SERVER`` /
``HPCOPT_TOKEN``; like ``--json`` they go before or after the command. Text goes to a
terminal as tables that fit its width; ``--json`` prints the same records typed (the
README's "JSON output" gives their shape).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpcopt.client import ApiError, Client
from hpcopt.records import Campaign, Trial, space_order
from hpcopt.spec import SpecError


def _common(top: bool) -> argparse.ArgumentParser:
    """The options every command takes. On the commands they default to SUPPRESS, so
    ``hpcopt --json list`` and ``hpcopt list --json`` both work and neither undoes the other."""
    p = argparse.ArgumentParser(add_help=False)
    unset: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}
    p.add_argument("--server", help="gRPC address HOST:PORT (env HPCOPT_SERVER, default 127.0.0.1:50051)", **unset)
    p.add_argument("--token", help="API token (env HPCOPT_TOKEN)", **unset)
    p.add_argument("--json", action="store_true", help="print typed JSON instead of text", **unset)
    return p


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="hpcopt", description="Submit and watch hpcopt campaigns.", parents=[_common(True)]
    )
    common = [_common(False)]
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=text, description=text, parents=common)

    s = command("submit", "submit a campaign spec (YAML or JSON file)")
    s.add_argument("spec", type=Path)
    s.add_argument("--dry-run", action="store_true", help="only validate the file")
    ls = command("list", "list campaigns, newest first")
    ls.add_argument("--limit", type=int, default=50, help="at most this many (default 50, at most 1000)")
    ls.add_argument("--offset", type=int, default=0, help="skip this many of the newest first")
    for name, text in (
        ("show", "one campaign"),
        ("best", "the best trial; of a multi-objective campaign, its Pareto front"),
        ("cancel", "cancel a running campaign"),
    ):
        command(name, text).add_argument("campaign", type=int)
    t = command("trials", "the trials of a campaign")
    t.add_argument("campaign", type=int)
    t.add_argument("--state", action="append", default=[], help="only this state (repeatable)")
    t.add_argument("--limit", type=int, default=0, help="at most this many (default all)")
    tr = command("trial", "one trial with its folds, learning curves and history: CAMPAIGN NUMBER (#27), or --id ID")
    tr.add_argument("campaign", type=int, nargs="?", help="the campaign")
    tr.add_argument("number", type=int, nargs="?", help="the trial's number in the campaign (as tables show: #27)")
    tr.add_argument("--id", type=int, dest="trial_id", help="the trial's global id instead (as the API returns)")
    w = command("watch", "a live view of a campaign until it ends (Ctrl-C leaves it)")
    w.add_argument("campaign", type=int)
    w.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes (default 2)")
    e = command("export", "export a campaign as JSON (re-importable)")
    e.add_argument("campaign", type=int)
    e.add_argument("-o", "--output", type=Path, help="file to write (default stdout)")
    i = command("import", "import an exported campaign as a new one")
    i.add_argument("file", type=Path)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return _run(args)
    except SpecError as exc:
        print(f"hpcopt: {args.spec} is not a valid campaign spec:", file=sys.stderr)
        for field, msg in exc.errors:
            print(f"  {field or '(document)'}: {msg}", file=sys.stderr)
        return 2
    except ApiError as exc:
        print(f"hpcopt: {exc.code}: {exc.message}", file=sys.stderr)
        for f in exc.field_errors:
            print(f"  {f['field']}: {f['message']}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"hpcopt: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace) -> int:
    from hpcopt import views

    if args.command == "submit" and args.dry_run:
        from hpcopt.specfile import load_spec_file

        spec = load_spec_file(args.spec)
        print(f"{args.spec}: valid ({len(spec.space)} parameters, {spec.budget.max_trials} trials)")
        return 0
    out = views.Output(args.json)
    with Client(args.server, args.token) as c:
        if args.command == "submit":
            campaign = Campaign.from_proto(c.create_campaign(args.spec))
            out.emit(campaign, f"campaign {campaign.id} {campaign.name!r} submitted")
        elif args.command == "list":
            page = c.campaign_page(args.offset, args.limit)
            out.campaigns([Campaign.from_proto(x) for x in page.campaigns])
            shown = args.offset + len(page.campaigns)
            if shown < page.total:
                print(
                    f"{len(page.campaigns)} of {page.total} campaigns shown, newest first; "
                    f"the next ones with --offset {shown}",
                    file=sys.stderr,
                )
        elif args.command == "show":
            out.campaign(Campaign.from_proto(c.get_campaign(args.campaign)))
        elif args.command == "best":
            campaign = c.get_campaign(args.campaign)
            objectives = Campaign.from_proto(campaign).objectives
            if len(objectives) > 1:  # the best is the Pareto front
                order = space_order(campaign)
                front = [Trial.from_proto(t, order) for t in c.get_pareto_front(args.campaign)]
                out.front(front, order, objectives)
            else:
                best = c.get_best_trial(args.campaign)
                out.trial(Trial.from_proto(best, space_order(campaign)))
        elif args.command == "cancel":
            x = Campaign.from_proto(c.cancel_campaign(args.campaign))
            out.emit(x, f"campaign {x.id} {x.state}")
        elif args.command == "trials":
            order = space_order(c.get_campaign(args.campaign))
            raw = (
                list(c.list_trials(args.campaign, args.state, 0, args.limit).trials)
                if args.limit
                else c.iter_trials(args.campaign, args.state)
            )
            out.trials([Trial.from_proto(t, order) for t in raw], order)
        elif args.command == "trial":
            if args.trial_id is not None:
                t = c.get_trial(args.trial_id)
            elif args.campaign is not None and args.number is not None:
                t = c.get_trial_by_number(args.campaign, args.number)
            else:
                print("hpcopt trial: give CAMPAIGN NUMBER (as tables show: #27) or --id ID", file=sys.stderr)
                return 2
            out.trial(Trial.from_proto(t, space_order(c.get_campaign(t.campaign_id))))
        elif args.command == "watch":
            from hpcopt.watch import watch

            return watch(c, args.campaign, args.interval, as_json=args.json)
        elif args.command == "export":
            text = json.dumps(c.export_campaign(args.campaign), indent=2)
            if args.output:
                args.output.write_text(text + "\n")
                print(f"wrote {args.output}", file=sys.stderr)
            else:
                print(text)
        elif args.command == "import":
            x = Campaign.from_proto(c.import_campaign(json.loads(args.file.read_text())))
            out.emit(x, f"imported as campaign {x.id} {x.name!r} ({x.state})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
