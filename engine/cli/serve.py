"""``tilewright serve``: requests arrive at a rate (or from a trace) and the project's devices serve them."""

from __future__ import annotations

import argparse
import math
import re
from typing import Any

from tilewright.engine.cli.common import COMMAND_LINE, finite_float, print_result
from tilewright.engine.errors import InputError, Problem


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="simulate serving: arrivals, continuous batching, TTFT/TPOT percentiles, goodput")
    p.add_argument("project", metavar="PROJECT", help="a project file, or a preset project's name (a decoder LLM)")
    g = p.add_argument_group("requests")
    g.add_argument("--rate", type=finite_float, metavar="R", help=f"Poisson arrivals per second (default {RATE:g})")
    g.add_argument("--requests", type=int, metavar="N", help=f"requests to simulate (default {REQUESTS})")
    g.add_argument("--seed", type=int, metavar="N", help="seed of the arrival times, ≥ 0 (default 0)")
    g.add_argument(
        "--trace",
        metavar="FILE",
        help="JSON or CSV with arrival_s, prompt_tokens, output_tokens per request (not with --rate, --requests, "
        "--seed, --prompt-tokens, --output-tokens: the trace gives them)",
    )
    g.add_argument("--prompt-tokens", type=int, metavar="N", help="prompt length (default: the project's)")
    g.add_argument("--output-tokens", type=int, metavar="N", help="output length (default: the project's)")
    g = p.add_argument_group("scheduler")
    g.add_argument("--max-batch", type=int, default=256, metavar="N", help="running sequences at most (default 256)")
    g.add_argument(
        "--token-budget", type=int, default=2048, metavar="N", help="new tokens per iteration at most (default 2048)"
    )
    g.add_argument(
        "--chunk",
        type=int,
        default=512,
        metavar="N",
        help="prompt tokens one sequence prefills per iteration at most (default 512)",
    )
    g.add_argument(
        "--disaggregate", metavar="P:D", help="prefill on P devices, decode on D others (P + D = the project's devices)"
    )
    g.add_argument("--spec-k", type=int, metavar="K", help="speculative decoding: draft tokens per verify step")
    g.add_argument("--spec-accept", type=finite_float, metavar="A", help="speculative decoding: acceptance rate 0–1")
    g.add_argument(
        "--spec-draft-cost",
        type=finite_float,
        metavar="F",
        help=f"one draft step's cost as a fraction of the target's decode step (default {DRAFT_COST:g}; "
        "with --spec-k)",
    )
    g = p.add_argument_group("report")
    g.add_argument("--slo-ttft", type=finite_float, metavar="S", help="time-to-first-token target, seconds")
    g.add_argument(
        "--slo-tpot", type=finite_float, metavar="S",
        help="time-per-output-token target, seconds (a request's (finish − first token)/(output tokens − 1))",
    )
    g.add_argument(
        "--sweep-rates",
        metavar="A,B,C|START:STOP:STEP",
        help="simulate each rate (instead of --rate); with --slo-ttft/--slo-tpot, report the highest whose "
        "goodput is ≥ 90 %% of requests, without them the measured curve only",
    )
    g.add_argument("--csv", metavar="FILE", help="write the per-request records as CSV")
    g.add_argument("--json", action="store_true", help="print one strict JSON object on stdout")
    g.add_argument("--allow-large", action="store_true", help="simulate even past the size limits")
    g.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="DOTTED.PATH=VALUE",
        help="override a project field, e.g. run.inference.kv_block_tokens=32",
    )
    g.add_argument("--quiet", action="store_true", help="no progress bar on a terminal")
    p.set_defaults(handler=serve_command)
    # argparse reads "-4:12" or "-1,2" as an unknown option ("expected one argument"); serve has no option
    # spelt like a number, so a value that starts "-<digit>" or "-." is a value, refused by its own check
    p._negative_number_matcher = re.compile(r"^-\.?\d")


RATE, REQUESTS, SEED, DRAFT_COST = 1.0, 100, 0, 0.05  # the flags' defaults (None in argparse: given or not)
# flags a trace replaces: given with --trace they would be ignored, so they are refused
TRACE_REPLACES = {"rate": "--rate", "requests": "--requests", "seed": "--seed", "prompt_tokens": "--prompt-tokens",
                  "output_tokens": "--output-tokens"}
MAX_RATES = 1000  # a rate sweep runs one serving simulation per rate


def parse_rates(text: str) -> list[float]:
    """ "1,2,4" or "0.5:4:0.5" (start, stop inclusive, step)."""
    try:
        if ":" in text:
            start, stop, step = (_finite(x) for x in text.split(":"))
            if step <= 0 or stop < start:
                raise ValueError
            n = math.floor((stop - start) / step + 1e-9) + 1
            if n > MAX_RATES:  # counted before the list is built: 1:1e9:1 must not allocate a billion rates
                raise InputError(COMMAND_LINE, Problem("--sweep-rates", f"{text!r}: {n:,} rates (limit {MAX_RATES:,})"))
            rates = [start + i * step for i in range(n)]
        else:
            rates = [_finite(x) for x in text.split(",")]  # an empty item ("1,,2", "") is no rate: refused
    except ValueError:
        raise InputError(
            COMMAND_LINE, Problem("--sweep-rates", f"{text!r}: give A,B,C or START:STOP:STEP of finite numbers "
                                   "(step > 0, stop ≥ start)")
        ) from None
    if not rates or any(not r > 0 for r in rates):
        raise InputError(COMMAND_LINE, Problem("--sweep-rates", f"{text!r}: every rate must be positive"))
    if len(rates) > MAX_RATES:
        raise InputError(COMMAND_LINE, Problem("--sweep-rates", f"{len(rates):,} rates (limit {MAX_RATES:,})"))
    return rates


def _given(value, default):
    """A flag's value, or its default when it was not given (argparse's default is None, so that a flag
    given alongside one that makes it idle can be told from one left out)."""
    return default if value is None else value


def _finite(text: str) -> float:
    """A finite number of a rate list, or ValueError ('nan', 'inf': a sweep to infinity never ends)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


def _disaggregate(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        p, d = (int(x) for x in text.split(":"))
    except ValueError:
        raise InputError(COMMAND_LINE, Problem("--disaggregate", f"{text!r}: give P:D, two device counts")) from None
    return p, d


def refuse_ignored_flags(args: argparse.Namespace) -> None:
    """Refuse a flag the simulation would not read, naming it and the flag that makes it idle (README: such
    flags exit 2): a trace gives every request's arrival and lengths, ``--sweep-rates`` replaces ``--rate``,
    and the draft's cost means nothing without speculative decoding."""
    problems = []
    if args.trace is not None:
        why = f"not with --trace {args.trace}: the trace gives every request's arrival time and lengths"
        problems += [Problem(flag, why) for name, flag in TRACE_REPLACES.items() if getattr(args, name) is not None]
    if args.sweep_rates is not None and args.rate is not None:
        problems.append(Problem("--rate", "not with --sweep-rates, whose rates replace it"))
    if args.spec_k is None and args.spec_draft_cost is not None:
        problems.append(Problem("--spec-draft-cost", "needs --spec-k (and --spec-accept): no speculative decoding"))
    if problems:
        raise InputError(COMMAND_LINE, problems)


def _project(args: argparse.Namespace):
    """The project file with the ``--set`` overrides, its name, and the edits (a refusal of a value ``--set``
    gave names the option, not the file: ``flag_blame``)."""
    from tilewright.engine.cli.flag_blame import FlagEdits
    from tilewright.engine.io.json_file import read_json, require_object
    from tilewright.engine.io.migrate import migrate
    from tilewright.engine.io.overrides import apply_overrides, parse_set_option
    from tilewright.engine.io.presets import resolve
    from tilewright.engine.io.project_file import project_from_data

    path = resolve("projects", args.project)
    source = str(path)
    data: dict[str, Any] = migrate(require_object(read_json(path), source), source)
    edits = FlagEdits(args, source, data)
    edits.after_flags(_with_lengths(data, _length_flags(args)))  # the lengths the flags serve are theirs
    for option in args.set:
        dotted, value = parse_set_option(option)
        apply_overrides(data, dotted, value, COMMAND_LINE)
        edits.set_option(dotted, option)
    with edits.blamed():
        return project_from_data(data, source), source, edits


def _length_flags(args: argparse.Namespace) -> dict[str, int]:
    """``--prompt-tokens``/``--output-tokens`` as the ``run.inference`` fields they override (``ServingConfig``),
    when given a length (below 1 they are refused by ``_config``, naming the flag)."""
    given = (("prompt_tokens", args.prompt_tokens), ("output_tokens", args.output_tokens))
    return {name: value for name, value in given if value is not None and value >= 1}


def _with_lengths(data: dict[str, Any], lengths: dict[str, int]) -> dict[str, Any]:
    """A copy of the raw project with ``lengths`` in its ``run.inference`` (a malformed part is left as it is,
    for validation to report)."""
    import copy

    out = copy.deepcopy(data)
    run, inference = out.get("run", {}), (out.get("run") or {}).get("inference", {})
    if lengths and isinstance(run, dict) and isinstance(inference, dict):
        out["run"] = run | {"inference": inference | lengths}
    return out


def served_project(project, args: argparse.Namespace):
    """``project`` with the flags' prompt and output lengths over its own: the sequences Poisson arrivals
    bring, held to the project's checks (the model's context: ``plan.context_length``) as a run's are."""
    lengths = _length_flags(args)
    if not lengths:
        return project
    inference = project.run.inference.model_copy(update=lengths)
    return project.model_copy(update={"run": project.run.model_copy(update={"inference": inference})})


def _config(args: argparse.Namespace, project, rates: list[float] | None):
    from tilewright.engine.serving import ServingConfig, SpecDecoding, load_trace

    if (args.spec_k is None) != (args.spec_accept is None):
        raise InputError(COMMAND_LINE, Problem("--spec-k/--spec-accept", "give both (draft length and acceptance)"))
    for flag, value in (
        ("--prompt-tokens", args.prompt_tokens),
        ("--output-tokens", args.output_tokens),
        ("--requests", args.requests),
    ):
        if value is not None and value < 1:
            raise InputError(COMMAND_LINE, Problem(flag, f"{value} must be at least 1"))
    requests = tuple(load_trace(args.trace)) if args.trace else None
    draft_cost = _given(args.spec_draft_cost, DRAFT_COST)
    spec = SpecDecoding(args.spec_k, args.spec_accept, draft_cost) if args.spec_k is not None else None
    config = ServingConfig(
        rate=rates[0] if rates else _given(args.rate, RATE),
        count=_given(args.requests, REQUESTS),
        seed=_given(args.seed, SEED),
        requests=requests,
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
        max_batch=args.max_batch,
        token_budget=args.token_budget,
        chunk=args.chunk,
        disaggregate=_disaggregate(args.disaggregate),
        spec=spec,
        slo_ttft_s=args.slo_ttft,
        slo_tpot_s=args.slo_tpot,
    )
    flags = {
        "rate": "--rate",
        "count": "--requests",
        "seed": "--seed",
        "max_batch": "--max-batch",
        "token_budget": "--token-budget",
        "chunk": "--chunk",
        "disaggregate": "--disaggregate",
        "spec_k": "--spec-k",
        "spec_accept": "--spec-accept",
        "spec_draft_cost": "--spec-draft-cost",
        "slo_ttft_s": "--slo-ttft",
        "slo_tpot_s": "--slo-tpot",
    }
    problems = [Problem(flags.get(name, name), reason) for name, reason in config.problems()]
    if problems:
        raise InputError(COMMAND_LINE, problems)
    return config


def _check_size(args: argparse.Namespace, project, config, rates: list[float] | None) -> None:
    from tilewright.engine.serving.budget import estimate

    inf = project.run.inference
    est = estimate(
        config.count,
        config.prompt_tokens or inf.prompt_tokens,
        config.output_tokens or inf.output_tokens,
        config.chunk,
        len(rates) if rates else 1,
        list(config.requests) if config.requests else None,
    )
    problems = est.problems()
    if problems and not args.allow_large:  # the estimate's problems name the flags that size the simulation
        raise InputError(
            COMMAND_LINE,
            [Problem(a, b) for a, b in problems]
            + [Problem("", "past the size limits; `tilewright serve --allow-large` simulates it anyway")],
        )


def _check_csv(args: argparse.Namespace, source: str) -> None:
    """A records file that cannot work is refused before the simulation, not after it: a folder, a missing
    folder, or one of the command's inputs (the project, the trace)."""
    import os

    from tilewright.engine.cli.common import refuse_overwriting_inputs

    if not args.csv:
        return
    refuse_overwriting_inputs({"--csv": args.csv}, [source, args.trace])
    if os.path.isdir(args.csv):
        raise InputError(COMMAND_LINE, Problem("--csv", f"{args.csv} is a folder; name a file for the records"))
    parent = os.path.dirname(os.path.abspath(args.csv))
    if not os.path.isdir(parent):
        raise InputError(COMMAND_LINE, Problem("--csv", f"{args.csv}: no folder {parent}"))


def serve_command(args: argparse.Namespace) -> int:
    from tilewright.engine.cli.context_check import refuse_served_past_context
    from tilewright.engine.cli.progress import ProgressPrinter
    from tilewright.engine.io.json_file import dumps_strict
    from tilewright.engine.plan.budget import estimate
    from tilewright.engine.plan.checks import raise_for_problems
    from tilewright.engine.serving import ServingSetupError, simulate_serving, sweep_rates

    refuse_ignored_flags(args)
    rates = parse_rates(args.sweep_rates) if args.sweep_rates is not None else None
    project, source, edits = _project(args)
    _check_csv(args, source)
    config = _config(args, project, rates)  # the flags' own faults first (a length below 1 is no length)
    # what `run` refuses, serve refuses too: the file's run past the size limits (the sizes of the serving run
    # are _check_size's), then the project with the lengths it serves (the flags' over the file's)
    too_large = [] if args.allow_large else estimate(project).problems()
    project = served_project(project, args)  # what is checked is what is served (a disaggregated group's too)
    with edits.blamed():
        if too_large:
            raise InputError(source, too_large)
        raise_for_problems(project, source, allow_large=True)
        refuse_served_past_context(project, source, args.trace, config.requests)  # a trace's, any mode's
        _check_size(args, project, config, rates)
    if rates and config.requests is not None:
        raise InputError(COMMAND_LINE, Problem("--sweep-rates", "sweeps Poisson rates; it cannot replay --trace"))
    if rates and args.csv:
        raise InputError(COMMAND_LINE, Problem("--csv", "writes one simulation's records; not with --sweep-rates"))
    try:
        with ProgressPrinter(not args.quiet, lines=False) as printer:
            progress = printer if printer.enabled else None
            if rates:
                sweep = sweep_rates(project, config, rates, progress=progress)
            else:
                result = simulate_serving(project, config, progress=progress)
    except ServingSetupError as exc:
        if exc.setting == "requests" and args.trace:  # the trace's requests: the trace file's
            raise InputError(args.trace, exc.reason) from None
        flag = {"disaggregate": "--disaggregate", "requests": "--requests"}.get(exc.setting)
        if flag:  # what the flags asked for, not the project file
            raise InputError(COMMAND_LINE, Problem(flag, exc.reason)) from None
        raise InputError(source, Problem(exc.setting, exc.reason)) from None
    head = serve_heading(project, config, rates, args.trace)
    if rates:
        print_result(sweep.to_json(), args.json, f"{head}\n{sweep.summary_text()}")
        return 0
    if args.csv:
        result.write_csv(args.csv)
    if args.json:
        print(dumps_strict(result.to_json(records=True), sort_keys=True))
    else:
        print(f"{head}\n{result.summary_text()}")
    return 0


def serve_heading(project, config, rates: list[float] | None, trace: str | None) -> str:
    """The first line of the text report, named like ``tilewright run``'s ("NAME — infer, event engine, 8
    devices"): the project, the devices it serves on, and what arrives."""
    from tilewright.engine.results.text import counted, number
    from tilewright.engine.serving.result import per_second

    if config.requests is not None:
        arrivals = f"{counted(len(config.requests), 'request')} replayed from {trace}"
    elif rates:
        shown = ", ".join(number(r) for r in rates) if len(rates) <= 4 else f"{number(rates[0])} … {number(rates[-1])}"
        unit = "request/s" if len(rates) == 1 and number(rates[0]) == "1" else "requests/s"
        arrivals = f"{counted(config.count, 'request')} per rate, Poisson arrivals at {shown} {unit}"
    else:
        arrivals = f"{counted(config.count, 'request')}, Poisson arrivals at {per_second(config.rate, 'request')}"
    return f"{project.name} — serve, {counted(project.mapping.devices, 'device')}, {arrivals}"
