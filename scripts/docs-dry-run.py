#!/usr/bin/env python3
"""The dry runs of a docs `console` block (scripts/docs-test.sh).

A console block is shown, not run: it needs a Slurm cluster, other hosts,
a GPU or spack. What can still be checked here is printed as shell commands,
one per line, for docs-test.sh to run in the docs' scratch folder:

  - every strata-train line (after srun, mpirun, or an sbatch script's srun):
    `mpirun -np N build/bin/strata-train ARGS --dry-run`, N the processes the
    launcher would start (srun -n, or -N x --ntasks-per-node, or the script's
    #SBATCH lines; mpirun -np). The dry run checks the options, the model,
    the layout against those ranks and the data (strata-train --help);
  - every `spack install|dev-build|spec|info strata...` line: its variants and
    versions against the recipe (spack/packages/strata/package.py), by the
    `--spack-check` mode of this script.

Nothing is printed for a block with nothing to check. A line this script
cannot read (an unknown launcher option before strata-train, say) is an
error: docs-test then fails, naming the line.

Usage: docs-dry-run.py BLOCK_FILE TOP        the commands for one block
       docs-dry-run.py --spack-check TOP SPEC...   check a spec; exit 1 naming what is unknown
"""
import os
import re
import shlex
import sys


def logical_lines(text):
    """The block's lines with backslash continuations joined, comments dropped."""
    out, cur = [], ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        out.append(cur)
        cur = ""
    if cur:
        out.append(cur)
    return [l for l in (strip_comment(l).strip() for l in out) if l]


def strip_comment(line):
    """The line up to a '#' that starts a word outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


SRUN_VALUE_OPTS = {"-N", "--nodes", "-n", "--ntasks", "--ntasks-per-node", "--mpi", "--gpus-per-node",
                   "-c", "--cpus-per-task", "-t", "--time", "-p", "--partition", "-J", "--job-name"}
MPIRUN_VALUE_OPTS = {"-np", "-n", "--np", "--hostfile", "-hostfile", "--host", "-H", "--map-by",
                     "--bind-to", "--mca", "-mca", "-x", "--rank-by"}
TWO_VALUE_OPTS = {"--mca", "-mca"}  # --mca NAME VALUE


def count_int(value, what, line):
    if not re.fullmatch(r"\d+", value):
        raise SystemExit(f"docs-dry-run: {what} {value!r} is not a whole number in: {line}")
    return int(value)


def launcher_processes(words, line, defaults=None):
    """(processes, index of the strata-train word) for srun/mpirun words."""
    nodes, per_node, tasks = None, None, None
    if defaults:
        nodes, per_node, tasks = defaults
    launcher = words[0]
    opts = SRUN_VALUE_OPTS if launcher == "srun" else MPIRUN_VALUE_OPTS
    i = 1
    while i < len(words):
        w = words[i]
        if os.path.basename(w) == "strata-train":
            break
        name, value = (w.split("=", 1) + [None])[:2] if w.startswith("--") else (w, None)
        if name in opts:
            if value is None:
                i += 1
                value = words[i]
                if name in TWO_VALUE_OPTS:
                    i += 1
            if launcher == "srun":
                if name in ("-N", "--nodes"):
                    nodes = count_int(value, name, line)
                elif name == "--ntasks-per-node":
                    per_node = count_int(value, name, line)
                elif name in ("-n", "--ntasks"):
                    tasks = count_int(value, name, line)
            elif name in ("-np", "-n", "--np"):
                tasks = count_int(value, name, line)
        elif not w.startswith("-"):
            return None, None  # another program (srun --mpi=list, ...)
        i += 1
    if i == len(words):
        return None, None
    if tasks is None:
        tasks = (nodes or 1) * (per_node or 1) if launcher == "srun" else None
    if tasks is None:
        raise SystemExit(f"docs-dry-run: mpirun without -np in: {line}")
    return tasks, i


def strata_train_command(words, processes, line):
    args = words[1:]
    for stop in (";", "&&", "||", "|"):
        if stop in args:
            args = args[: args.index(stop)]
    # --version and --help run as they are (they start nothing).
    quick = any(a in ("--version", "--help", "-h") for a in args)
    cmd = ["build/bin/strata-train"] + args + ([] if quick else ["--dry-run"])
    if processes > 1:
        cmd = ["mpirun", "-np", str(processes)] + cmd
    return " ".join(shlex.quote(w) for w in cmd)


def sbatch_commands(script, top, line):
    path = os.path.join(top, script)
    if not os.path.isfile(path):
        raise SystemExit(f"docs-dry-run: sbatch script {script} not found, in: {line}")
    text = open(path).read()
    nodes = per_node = tasks = None
    for m in re.finditer(r"^#SBATCH\s+(\S+?)(?:[=\s]+(\S+))?\s*$", text, re.M):
        name, value = m.group(1), m.group(2)
        if name in ("--nodes", "-N"):
            nodes = count_int(value, name, line)
        elif name == "--ntasks-per-node":
            per_node = count_int(value, name, line)
        elif name in ("--ntasks", "-n"):
            tasks = count_int(value, name, line)
    out = []
    for l in logical_lines(text):
        # The job's own variables take harmless values.
        l = re.sub(r"\$\{?SLURM_JOB_ID\}?", "0", l)
        l = re.sub(r"\$\{?SLURM_CPUS_PER_TASK(:-[^}]*)?\}?", "1", l)
        out += commands_of_line(l, top, (nodes, per_node, tasks))
    return out


def commands_of_line(line, top, defaults=None):
    try:
        words = shlex.split(line)
    except ValueError as e:
        raise SystemExit(f"docs-dry-run: cannot read ({e}): {line}")
    # VAR=value prefixes, `spack load strata &&`, `(cd ... && ...)` are not launchers.
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        words = words[1:]
    if "&&" in words:
        out = []
        for part in " ".join(shlex.quote(w) for w in words).split(" '&&' "):
            out += commands_of_line(part, top, defaults)
        return out
    if not words:
        return []
    head = os.path.basename(words[0])
    if head in ("srun", "mpirun"):
        n, at = launcher_processes(words, line, defaults if head == "srun" else None)
        return [] if n is None else [strata_train_command(words[at:], n, line)]
    if head == "strata-train":
        return [strata_train_command(words, 1, line)]
    if head == "cluster-sim.sh" and len(words) > 1 and words[1] == "mpirun":
        return commands_of_line(" ".join(shlex.quote(w) for w in words[1:]), top)
    if head == "sbatch":
        # $repo/... or $PWD/...: the checkout; a trailing ')' closes a subshell.
        scripts = [re.sub(r"^\$\{?(repo|PWD)\}?/", "", w).rstrip(")") for w in words[1:]]
        scripts = [w for w in scripts if w.endswith(".sbatch")]
        return sbatch_commands(scripts[0], top, line) if scripts else []
    if head == "spack" and len(words) > 2 and words[1] in ("install", "dev-build", "spec", "info"):
        spec = words[2:]
        if any(w == "strata" or w.startswith("strata@") or w.startswith("strata+") for w in spec):
            return [" ".join(["python3", "scripts/docs-dry-run.py", "--spack-check", "."] +
                             [shlex.quote(w) for w in spec])]
    return []


def recipe(top):
    text = open(os.path.join(top, "spack", "packages", "strata", "package.py")).read()
    variants = set(re.findall(r"variant\(\s*\"([A-Za-z0-9_-]+)\"", text))
    versions = set(re.findall(r"version\(\s*\"([^\"]+)\"", text))
    # Kokkos' and CudaPackage/ROCmPackage's variants the recipe inherits.
    for base, names in (("CudaPackage", ("cuda", "cuda_arch")), ("ROCmPackage", ("rocm", "amdgpu_target"))):
        if base in text:
            variants.update(names)
    return variants, versions


def spack_check(top, spec):
    variants, versions = recipe(top)
    bad = []
    dep = False
    for w in spec:
        if w.startswith("^"):
            dep = True  # a dependency's spec: its own variants follow
            continue
        if w.startswith("%") or w.startswith("-"):
            continue
        if w == "strata" or w.startswith("strata"):
            dep = False
            m = re.fullmatch(r"strata(@([^+~\s]+))?(.*)", w)
            if m.group(2) and m.group(2) not in versions:
                bad.append(f"version @{m.group(2)} (the recipe has {', '.join(sorted(versions))})")
            rest = m.group(3)
            words = re.findall(r"[+~][A-Za-z0-9_-]+", rest)
        else:
            words = [w]
        if dep:
            continue
        for v in words:
            name = v[1:] if v[0] in "+~" else v.split("=", 1)[0]
            if name not in variants:
                bad.append(f"variant {v!r}")
    if bad:
        print(f"docs-dry-run: spack spec {' '.join(spec)}: unknown to spack/packages/strata/package.py: "
              + "; ".join(bad) + f" (its variants: {', '.join(sorted(variants))})", file=sys.stderr)
        return 1
    print(f"spack spec {' '.join(spec)}: every variant and version is the recipe's")
    return 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "--spack-check":
        return spack_check(argv[2], argv[3:])
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    block, top = argv[1], argv[2]
    for line in logical_lines(open(block).read()):
        for cmd in commands_of_line(line, top):
            print(cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
