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


rule list_provenance:
    """What made each final artifact: its step, the digest of the code it ran, its parameters.

    input:  the final artifacts of `all` that record provenance (Parquet, JSON)
    output: provenance.json, provenance.md, provenance.html (report)
    """
    input:
        provenance_inputs,
    output:
        record="results/list_provenance/{corpus}/provenance.json",
        markdown="results/list_provenance/{corpus}/provenance.md",
        html=report(
            "results/list_provenance/{corpus}/provenance.html",
            caption="../report/provenance.rst",
            category="Provenance",
            labels={"result": "what made each result", "corpus": "{corpus}"},
        ),
    log:
        "logs/list_provenance/{corpus}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        out_dir=folder_of("record"),
    shell:
        "synthdeid --log {log:q} list-provenance --artifacts {input:q}"
        " --out-dir {params.out_dir:q}"
