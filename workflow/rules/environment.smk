rule probe_gpu_env:
    """Record the node, SLURM job and accelerators a GPU rule gets.

    Asks for one GPU like every GPU rule (a generic gpu=1 resource, mapped to
    --gpus=1 by the SLURM executor plugin). Not part of `all`: run it as a
    target to check a cluster profile before a long training run.
    output: environment.json
    """
    output:
        "results/probe_gpu_env/environment.json",
    log:
        "logs/probe_gpu_env/environment.log",
    conda:
        "../../envs/gpu.yaml"
    resources:
        gpu=1,
    shell:
        "synthdeid --log {log:q} probe-gpu-env --out {output:q}"
