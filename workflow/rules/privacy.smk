rule ledger_privacy:
    """The privacy ledger: every DP release, its population, and the composed total.

    input:  privacy.json of the DP language model and of each DP tabular fit
    output: ledger.json, ledger.md, ledger.html (report); refused, and nothing
            written, when a population's total exceeds privacy.budgets
    """
    input:
        lambda w: [spec["file"] for spec in ledger_releases()],
    output:
        record="results/ledger_privacy/{corpus}/ledger.json",
        markdown="results/ledger_privacy/{corpus}/ledger.md",
        html=report(
            "results/ledger_privacy/{corpus}/ledger.html",
            caption="../report/privacy_ledger.rst",
            category="Privacy",
            labels={"result": "privacy ledger", "corpus": "{corpus}"},
        ),
    log:
        "logs/ledger_privacy/{corpus}.log",
    conda:
        "../../envs/cpu.yaml"
    params:
        releases=lambda w: as_json(ledger_releases()),
        budgets=as_json(LEDGER_BUDGETS),
        out_dir=folder_of("record"),
    shell:
        "synthdeid --log {log:q} ledger-privacy --releases {params.releases:q}"
        " --budgets {params.budgets:q} --out-dir {params.out_dir:q}"
