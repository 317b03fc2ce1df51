"""synthdeid: privacy-preserving synthetic clinical text and de-identification.

Run the embedded demo:        snakemake --cores 2
Run on PhysioNet deid:        snakemake --cores 2 --configfile config/physionet.yaml
Run on a SLURM cluster:       snakemake --profile profiles/slurm
"""

from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/ingest.smk"
include: "workflow/rules/mask.smk"
include: "workflow/rules/surrogate.smk"
include: "workflow/rules/synth_template.smk"
include: "workflow/rules/synth_dplm.smk"
include: "workflow/rules/synth_tabular.smk"
include: "workflow/rules/teacher.smk"
include: "workflow/rules/privacy.smk"
include: "workflow/rules/ner.smk"
include: "workflow/rules/environment.smk"


# targets and small aggregations run where snakemake runs, never as cluster jobs
localrules:
    all,
    study,
    archive,
    archive_run,
    compare_ner,
    plan_runs,
    tabulate_study,
    compare_ner_archive,
    tabulate_study_archive,
    compare_teacher,
    ledger_privacy,


rule all:
    default_target: True
    input:
        all_targets(),


# a change to the code a step runs reruns it (params.code: synthdeid.code_identity)
add_code_params(workflow.rules)
