"""``greenadapt finetune``: a labelling task trained on both tokenizers (the mixture) and scored mean-pooled."""
