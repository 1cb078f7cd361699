"""`tracea doctor`: parse the options, run the doctor, render the profile (or print it as JSON), decide the exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer


def doctor(
    quick: bool = typer.Option(False, "--quick", help="Inventory and checks only, no measurement (keeps earlier measurements)."),
    as_json: bool = typer.Option(False, "--json", help="Print the capability profile as JSON on stdout, and nothing else."),
    output: Optional[Path] = typer.Option(None, "--output", metavar="PATH", help="Also write the profile (JSON) to PATH."),
    device: Optional[str] = typer.Option(None, "--device", metavar="N|N,M|all",
                                         help="GPUs to measure, as CUDA ordinals (default: 0)."),
    strict: bool = typer.Option(False, "--strict", help="Exit with code 1 when any check fails (warnings alone pass)."),
    list_checks: bool = typer.Option(False, "--list-checks", help="List the checks and exit."),
    check: Optional[str] = typer.Option(None, "--check", metavar="NAME", help="Run only the check NAME."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="auto|HOST:PORT",
                                              help="Report the Ray cluster there (nodes, GPUs, GPU kinds) and exit."),
) -> None:
    """Inventory this machine, check it for problems, measure what it can do, and write its capability profile."""
    from tracea_cli.cli.output import print_json, stderr_console, stdout_console
    from tracea_cli.config import Settings
    from tracea_cli.doctor import checks as doctor_checks
    from tracea_cli.doctor import render
    from tracea_cli.doctor.run import DoctorRequest, run_doctor
    from tracea_cli.errors import RunFailed
    from tracea_cli.files import check_writable, write_atomic

    settings = Settings.from_env()
    out = stdout_console(settings.no_color)
    err = stderr_console(settings.no_color)
    if list_checks:
        if as_json:
            print_json([{"id": s.id, "title": s.title, "full_run_only": s.full_only} for s in doctor_checks.CHECKS])
        else:
            render.render_check_list(out, doctor_checks.CHECKS)
        return
    if ray_address is not None:
        from tracea_cli.doctor.cluster import inspect_cluster

        with err.status(f"tracea doctor: connecting to the Ray cluster at {ray_address}", spinner="dots"):
            cluster = inspect_cluster(ray_address)
        if as_json:
            print_json({"ray_cluster": cluster.as_dict()})
        else:
            render.render_ray_cluster(out, cluster)
        return
    if check is not None:
        doctor_checks.spec(check)  # an unknown name: one sentence, exit 2, before any work
    if output is not None:
        output = check_writable(output, "output")

    request = DoctorRequest(quick=quick, devices=device, check=check)
    with err.status("tracea doctor: starting", spinner="dots") as status:
        result = run_doctor(request, settings, step=lambda text: status.update(f"tracea doctor: {text}"))

    if result.profile is None:  # --check NAME
        document = {"checks": [c.as_dict() for c in result.checks]}
        if output is not None:
            write_atomic(output, json.dumps(document, indent=2) + "\n", "output")
        if as_json:
            print_json(document)
        else:
            render.render_checks(out, result.checks)
    else:
        profile = result.profile
        if output is not None:
            write_atomic(output, profile.to_json(), "output")
        if as_json:
            print_json(profile.as_dict())
        else:
            render.render_profile(out, profile)
        if result.saved_to is not None:
            err.print(f"profile written to {result.saved_to}" + (f" and {output}" if output else ""), markup=False)
        else:
            err.print(f"warning: the profile was not saved to the data folder: {result.save_error}", style="yellow",
                      markup=False)

    failed = [c for c in result.checks if c.status == "fail"]
    if strict and failed:
        names = ", ".join(sorted({c.id + (f" ({c.device})" if c.device else "") for c in failed}))
        raise RunFailed(f"{len(failed)} check(s) failed: {names}.", "See each check's fix above.")


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
