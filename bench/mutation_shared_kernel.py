"""Imported by mutmut's fork server (bench/mutation-preload.txt): with GPUFLEET_MUTATION_SHARED_KERNEL set, it starts
jsii's node kernel there, so every forked child uses that one kernel instead of starting its own (about 3 s of CPU a
mutant). bench/mutation.py sets the variable and runs one child at a time: two children talking to one kernel at
once read each other's answers."""

import os

from bench.mutation_selection import SHARED_KERNEL_VARIABLE

if os.environ.get(SHARED_KERNEL_VARIABLE):
    import aws_cdk

    aws_cdk.App()
