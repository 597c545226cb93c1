# shellcheck shell=sh
# The EFA installer's login-shell profile (stand-in: its name and effect, Amazon's Open MPI and the EFA tools on
# PATH for login shells only, as scripts/node/efa-env.sh and run-nccl-tests.sh expect; its exact text is not
# published, (unconfirmed)).
PATH=$PATH:/opt/amazon/openmpi/bin:/opt/amazon/efa/bin
