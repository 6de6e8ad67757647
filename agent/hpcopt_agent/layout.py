"""How an allocation's ranks are laid out: trial groups, fold groups, folds.

The world communicator splits into ``groups`` trial groups of equal size; each runs one
trial at a time and its first rank (the group leader) is one registered agent. Inside a
group, ranks form fold groups of ``ranks_per_fold`` ranks that train one fold each with
the campaign's scheme; the K folds go to the fold groups in turn. Everything here is
plain arithmetic, checked before any trial is taken.
"""

from __future__ import annotations

from hpcopt.core.planner import Layout


class LayoutError(ValueError):
    """A layout that does not divide; the message says what would fit."""


def fitting_groups(world: int, ranks_per_fold: int, folds: int) -> list[int]:
    """Every ``--groups`` value that gives a valid layout for this world size."""
    fits = []
    for groups in range(1, world + 1):
        if world % groups:
            continue
        size = world // groups
        if size % ranks_per_fold == 0 and size // ranks_per_fold <= folds:
            fits.append(groups)
    return fits


def plan(world: int, groups: int, ranks_per_fold: int, folds: int) -> Layout:
    """The layout, or :class:`LayoutError` saying why not and what would fit."""
    if world < 1 or ranks_per_fold < 1 or folds < 1:
        raise LayoutError(f"world ({world}), ranks_per_fold ({ranks_per_fold}) and folds ({folds}) must be >= 1")
    problem = ""
    if groups < 1:
        problem = f"--groups must be >= 1, got {groups}"
    elif world % groups:
        problem = f"{world} ranks do not split into {groups} equal trial groups"
    elif (world // groups) % ranks_per_fold:
        problem = (
            f"a trial group of {world // groups} ranks does not split into fold groups of "
            f"training.ranks_per_fold={ranks_per_fold} ranks"
        )
    elif (world // groups) // ranks_per_fold > folds:
        problem = (
            f"a trial group of {world // groups} ranks makes {(world // groups) // ranks_per_fold} fold groups "
            f"but the campaign has only {folds} folds, so ranks would sit idle"
        )
    if problem:
        fits = fitting_groups(world, ranks_per_fold, folds)
        if fits:
            hint = "with these ranks, these fit: " + ", ".join(
                f"--groups {g} ({plan(world, g, ranks_per_fold, folds).describe()})" for g in fits
            )
        else:
            need = ranks_per_fold
            hint = f"no --groups fits {world} ranks; use a multiple of {need} ranks (ranks_per_fold)"
        raise LayoutError(f"{problem}; {hint}")
    return Layout(world, groups, ranks_per_fold, folds)
