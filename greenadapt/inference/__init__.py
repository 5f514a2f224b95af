"""Using a fine-tuned folder: ``greenadapt.load`` (``predictor``), ``predict`` on files and raw text
(``labelling``, ``predict_text``, ``multitask``) and the transformers pipelines (``hf_pipeline``).
"""
