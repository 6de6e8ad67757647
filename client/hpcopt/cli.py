"""``hpcopt``: submit and watch campaigns from the shell (over gRPC).

The server address and token come from ``--server``/``--token`` or ``HPCOPT_SERVER`` /
``HPCOPT_TOKEN``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict

from hpcopt.client import ApiError, Client, campaign_state, param_values, trial_state
from hpcopt.spec import SpecError
from hpcopt.v1 import common_pb2


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="hpcopt", description="Submit and watch hpcopt campaigns.")
    ap.add_argument("--server", help="gRPC address HOST:PORT (env HPCOPT_SERVER, default 127.0.0.1:50051)")
    ap.add_argument("--token", help="API token (env HPCOPT_TOKEN)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of tables")
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("submit", help="submit a campaign spec (YAML or JSON file)")
    s.add_argument("spec", type=Path)
    s.add_argument("--dry-run", action="store_true", help="only validate the file")
    sub.add_parser("list", help="list campaigns")
    for name, text in (("show", "one campaign"), ("best", "the best trial"), ("cancel", "cancel a campaign")):
        sub.add_parser(name, help=text).add_argument("campaign", type=int)
    t = sub.add_parser("trials", help="the trials of a campaign")
    t.add_argument("campaign", type=int)
    t.add_argument("--state", action="append", default=[], help="only this state (repeatable)")
    t.add_argument("--limit", type=int, default=0, help="at most this many (default all)")
    tr = sub.add_parser("trial", help="one trial with its folds, curves and history")
    tr.add_argument("trial", type=int)
    e = sub.add_parser("export", help="export a campaign as JSON (re-importable)")
    e.add_argument("campaign", type=int)
    e.add_argument("-o", "--output", type=Path, help="file to write (default stdout)")
    i = sub.add_parser("import", help="import an exported campaign as a new one")
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


def _run(args: argparse.Namespace) -> int:
    if args.command == "submit" and args.dry_run:
        from hpcopt.specfile import load_spec_file

        spec = load_spec_file(args.spec)
        print(f"{args.spec}: valid ({len(spec.space)} parameters, {spec.budget.max_trials} trials)")
        return 0
    with Client(args.server, args.token) as c:
        if args.command == "submit":
            campaign = c.create_campaign(args.spec)
            _emit(args, campaign, f"campaign {campaign.id} {campaign.name!r} submitted")
        elif args.command == "list":
            rows = c.list_campaigns()
            if args.json:
                _print_json([_dict(x) for x in rows])
            else:
                _table(
                    ["id", "name", "state", "algorithm", "done", "best"],
                    [
                        [x.id, x.name, campaign_state(x.state), x.algorithm, _done(x), _num(x, "best_value")]
                        for x in rows
                    ],
                )
        elif args.command == "show":
            _show(args, c.get_campaign(args.campaign))
        elif args.command == "best":
            best = c.get_best_trial(args.campaign)
            _emit(args, best, _trial_text(best))
        elif args.command == "cancel":
            x = c.cancel_campaign(args.campaign)
            _emit(args, x, f"campaign {x.id} {campaign_state(x.state)}")
        elif args.command == "trials":
            trials = (
                list(c.list_trials(args.campaign, args.state, 0, args.limit).trials)
                if args.limit
                else c.iter_trials(args.campaign, args.state)
            )
            if args.json:
                _print_json([_dict(t) for t in trials])
            else:
                _table(
                    ["id", "#", "state", "attempt", "value", "± std", "params"],
                    [
                        [
                            t.id,
                            t.number,
                            trial_state(t.state),
                            t.attempt,
                            _num(t, "value"),
                            _num(t, "value_std"),
                            _params(t),
                        ]
                        for t in trials
                    ],
                )
        elif args.command == "trial":
            t = c.get_trial(args.trial)
            _emit(args, t, _trial_text(t))
        elif args.command == "export":
            text = json.dumps(c.export_campaign(args.campaign), indent=2)
            if args.output:
                args.output.write_text(text + "\n")
                print(f"wrote {args.output}", file=sys.stderr)
            else:
                print(text)
        elif args.command == "import":
            x = c.import_campaign(json.loads(args.file.read_text()))
            _emit(args, x, f"imported as campaign {x.id} {x.name!r}")
    return 0


def _dict(msg: Any) -> dict[str, Any]:
    out: dict[str, Any] = MessageToDict(msg, preserving_proto_field_name=True)
    return out


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2))


def _emit(args: argparse.Namespace, msg: Any, text: str) -> None:
    if args.json:
        _print_json(_dict(msg))
    else:
        print(text)


def _num(msg: Any, field: str) -> str:
    return f"{getattr(msg, field):.6g}" if msg.HasField(field) else "-"


def _done(c: common_pb2.Campaign) -> str:
    done = sum(n for s, n in c.trial_counts.items() if s not in ("QUEUED", "RUNNING"))
    return f"{done}/{c.max_trials}"


def _params(t: common_pb2.Trial) -> str:
    return " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in param_values(t).items())


def _show(args: argparse.Namespace, c: common_pb2.Campaign) -> None:
    if args.json:
        _print_json(_dict(c))
        return
    counts = ", ".join(f"{s} {n}" for s, n in sorted(c.trial_counts.items())) or "none yet"
    print(f"campaign {c.id} {c.name!r}: {campaign_state(c.state)}")
    print(f"  algorithm  {c.algorithm}; {c.direction} {c.metric}")
    print(f"  trials     {_done(c)} finished ({counts})")
    if c.HasField("best_value"):
        print(f"  best       {c.best_value:.6g} (trial {c.best_trial_id})")


def _trial_text(t: common_pb2.Trial) -> str:
    lines = [
        f"trial {t.id} (#{t.number} of campaign {t.campaign_id}): {trial_state(t.state)}, attempt {t.attempt}",
        f"  value   {_num(t, 'value')} ± {_num(t, 'value_std')}",
        f"  params  {_params(t)}",
    ]
    for f in t.folds:
        value = f"{f.value:.6g}" if f.HasField("value") else "-"
        status = "finished" if f.finished else "in progress"
        lines.append(f"  fold {f.index}  {value}  {status}  {f.checkpoint_uri}")
    if t.error:
        lines.append(f"  error   {t.error}")
    return "\n".join(lines)


def _table(header: list[str], rows: list[list[Any]]) -> None:
    cells = [header] + [[str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())


if __name__ == "__main__":
    sys.exit(main())
