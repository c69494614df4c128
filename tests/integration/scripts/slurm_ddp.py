"""ddp_gloo.py as a Slurm task per rank starts it: the script takes its rank from Slurm's variables.

What sbatch scripts do before `srun python train.py`: RANK and WORLD_SIZE are not set by
Slurm; the script reads SLURM_PROCID and SLURM_NTASKS (MASTER_ADDR/MASTER_PORT from the batch script).
"""
import os
import runpy
import sys
from pathlib import Path

os.environ["RANK"] = os.environ["SLURM_PROCID"]
os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
os.environ["LOCAL_RANK"] = os.environ.get("SLURM_LOCALID", "0")
sys.argv = [str(Path(__file__).with_name("ddp_gloo.py")), *sys.argv[1:]]
runpy.run_path(sys.argv[0], run_name="__main__")
