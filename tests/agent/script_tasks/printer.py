"""No hpcopt import at all: the parameters from the command line, the result printed
on the documented metrics line (or not printed, with --silent)."""

import argparse
import json

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--fold", type=int, required=True)
parser.add_argument("--params-file", required=True)
parser.add_argument("--silent", action="store_true")
args = parser.parse_args()
with open(args.params_file) as f:
    assert json.load(f)["lr"] == args.lr
print("training...")
if not args.silent:
    print("hpcopt-metrics " + json.dumps({"val_loss": args.lr * 100 + args.fold, "val_accuracy": 0.5}))
