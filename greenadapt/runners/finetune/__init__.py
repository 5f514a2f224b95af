"""``greenadapt finetune``: a labelling task trained on both tokenizers' views (or their mixture) and scored mean-pooled."""
