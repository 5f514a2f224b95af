"""Generate ``sample.txt.gz``: a synthetic biomedical corpus for demos and tests.

The text is made from sentence templates and word lists written for
greenadapt (no text from any real corpus), so it can ship under CC0. It is
organised in clusters (a clinical area: its diseases, drug classes and
drugs, genes, symptoms, anatomy, procedures, biomarkers, pathogens) and
every sentence draws from one cluster, so word2vec learns sensible
neighbours: remdesivir near favipiravir, glioblastoma near temozolomide
and IDH1. Many words are ones a general WordPiece vocabulary splits
(cardiomyopathy, thrombocytopenia, hydroxychloroquine), which is what
domain adaptation adds as whole tokens.

Deterministic: the same seed and token target give the same bytes (fixed
gzip header, no timestamps).

    python corpora/make_sample.py                      # rewrites corpora/sample.txt.gz
    python corpora/make_sample.py --out /tmp/s.txt.gz --tokens 50000 --seed 7
"""

from __future__ import annotations

import argparse
import gzip
import random
import re
import sys
from collections.abc import Iterator
from pathlib import Path

DEFAULT_SEED = 20200601
DEFAULT_TOKENS = 400_000
TOKEN_RE = re.compile(r"\w+|[^\w\s]")

# --------------------------------------------------------------------------
# Clusters. Keys are slot names used in the templates below; "drugs" maps a
# drug class to its drugs (every class has at least two).

CLUSTERS: dict[str, dict[str, object]] = {
    "heart failure": {
        "disease": ["cardiomyopathy", "heart failure", "myocarditis", "cardiomegaly", "ventricular dysfunction"],
        "drugs": {
            "beta-blocker": ["metoprolol", "bisoprolol", "carvedilol", "nebivolol"],
            "mineralocorticoid receptor antagonist": ["spironolactone", "eplerenone", "finerenone"],
            "angiotensin receptor-neprilysin inhibitor": ["sacubitril", "valsartan"],
            "loop diuretic": ["furosemide", "torsemide", "bumetanide"],
        },
        "gene": ["MYH7", "TNNT2", "LMNA", "TTN", "MYBPC3"],
        "symptom": ["dyspnea", "orthopnea", "peripheral edema", "fatigue", "exercise intolerance"],
        "anatomy": ["myocardium", "left ventricle", "cardiomyocytes", "interventricular septum"],
        "procedure": ["echocardiography", "cardiac magnetic resonance imaging", "endomyocardial biopsy"],
        "biomarker": ["natriuretic peptide", "troponin", "galectin-3"],
        "finding": ["hypertrophy", "fibrosis", "dilatation", "reduced ejection fraction"],
    },
    "arrhythmia": {
        "disease": ["atrial fibrillation", "tachycardia", "bradycardia", "ventricular fibrillation", "arrhythmia"],
        "drugs": {
            "antiarrhythmic": ["amiodarone", "dronedarone", "flecainide", "sotalol"],
            "anticoagulant": ["apixaban", "rivaroxaban", "dabigatran", "warfarin", "edoxaban"],
        },
        "gene": ["SCN5A", "KCNQ1", "KCNH2", "RYR2", "PITX2"],
        "symptom": ["palpitations", "syncope", "dizziness", "chest discomfort"],
        "anatomy": ["sinoatrial node", "atrioventricular node", "left atrium", "pulmonary veins"],
        "procedure": ["electrocardiography", "catheter ablation", "Holter monitoring", "cardioversion"],
        "biomarker": ["potassium", "magnesium", "thyroid-stimulating hormone"],
        "finding": ["conduction delay", "prolonged QT interval", "atrial enlargement"],
    },
    "atherosclerosis": {
        "disease": ["atherosclerosis", "myocardial infarction", "hypercholesterolemia", "angina pectoris", "stroke"],
        "drugs": {
            "statin": ["atorvastatin", "rosuvastatin", "simvastatin", "pravastatin"],
            "PCSK9 inhibitor": ["evolocumab", "alirocumab", "inclisiran"],
            "antiplatelet agent": ["clopidogrel", "ticagrelor", "prasugrel", "aspirin"],
        },
        "gene": ["PCSK9", "LDLR", "APOB", "LPA", "ANGPTL3"],
        "symptom": ["angina", "chest pain", "diaphoresis", "claudication"],
        "anatomy": ["coronary arteries", "arterial intima", "aorta", "endothelium"],
        "procedure": ["coronary angiography", "percutaneous coronary intervention", "carotid ultrasound"],
        "biomarker": ["low-density lipoprotein cholesterol", "lipoprotein(a)", "high-sensitivity troponin"],
        "finding": ["plaque rupture", "calcification", "stenosis", "intimal thickening"],
    },
    "thrombocytopenia": {
        "disease": ["thrombocytopenia", "immune thrombocytopenic purpura", "thrombotic thrombocytopenic purpura",
                    "heparin-induced thrombocytopenia", "pancytopenia"],
        "drugs": {
            "thrombopoietin receptor agonist": ["eltrombopag", "romiplostim", "avatrombopag"],
            "immunosuppressant": ["rituximab", "azathioprine", "mycophenolate"],
            "anti-von Willebrand factor therapy": ["caplacizumab", "recombinant ADAMTS13"],
        },
        "gene": ["ADAMTS13", "MPL", "THPO", "GP1BA"],
        "symptom": ["petechiae", "purpura", "epistaxis", "mucosal bleeding", "bruising"],
        "anatomy": ["megakaryocytes", "platelets", "bone marrow", "spleen"],
        "procedure": ["peripheral blood smear", "bone marrow biopsy", "plasmapheresis", "platelet transfusion"],
        "biomarker": ["platelet count", "lactate dehydrogenase", "schistocytes", "ADAMTS13 activity"],
        "finding": ["megakaryocytic hyperplasia", "microangiopathy", "splenomegaly"],
    },
    "anemia": {
        "disease": ["thalassemia", "sickle cell disease", "iron deficiency anemia", "hemolytic anemia",
                    "aplastic anemia", "hemochromatosis"],
        "drugs": {
            "iron chelator": ["deferoxamine", "deferasirox", "deferiprone"],
            "erythropoiesis-stimulating agent": ["epoetin", "darbepoetin", "luspatercept"],
            "hemoglobin modulator": ["hydroxyurea", "voxelotor", "crizanlizumab"],
        },
        "gene": ["HBB", "HBA1", "HFE", "BCL11A", "TMPRSS6"],
        "symptom": ["pallor", "jaundice", "vaso-occlusive crises", "fatigue", "tachycardia"],
        "anatomy": ["erythrocytes", "reticulocytes", "bone marrow", "spleen"],
        "procedure": ["hemoglobin electrophoresis", "red cell transfusion", "hematopoietic stem cell transplantation"],
        "biomarker": ["hemoglobin", "ferritin", "haptoglobin", "transferrin saturation", "hepcidin"],
        "finding": ["microcytosis", "hemolysis", "iron overload", "ineffective erythropoiesis"],
    },
    "COVID-19": {
        "disease": ["COVID-19", "viral pneumonia", "acute respiratory distress syndrome", "cytokine storm",
                    "multisystem inflammatory syndrome"],
        "pathogen": ["SARS-CoV-2", "the novel coronavirus", "SARS-CoV-2 variants", "betacoronavirus"],
        "drugs": {
            "antiviral": ["remdesivir", "favipiravir", "molnupiravir", "nirmatrelvir", "lopinavir"],
            "corticosteroid": ["dexamethasone", "methylprednisolone", "hydrocortisone"],
            "immunomodulator": ["tocilizumab", "baricitinib", "sarilumab", "anakinra"],
            "antimalarial": ["hydroxychloroquine", "chloroquine"],
        },
        "gene": ["ACE2", "TMPRSS2", "IFITM3", "TLR7", "OAS1", "IFNAR2"],
        "symptom": ["fever", "dry cough", "anosmia", "ageusia", "myalgia", "hypoxemia"],
        "anatomy": ["alveoli", "respiratory epithelium", "pneumocytes", "nasopharynx"],
        "procedure": ["polymerase chain reaction", "chest computed tomography", "mechanical ventilation",
                      "extracorporeal membrane oxygenation", "prone positioning"],
        "biomarker": ["interleukin-6", "D-dimer", "C-reactive protein", "ferritin", "viral load"],
        "finding": ["ground-glass opacities", "diffuse alveolar damage", "microthrombi", "consolidation"],
    },
    "bacterial pneumonia": {
        "disease": ["community-acquired pneumonia", "ventilator-associated pneumonia", "sepsis", "empyema",
                    "bacteremia"],
        "pathogen": ["Streptococcus pneumoniae", "Staphylococcus aureus", "Klebsiella pneumoniae",
                     "Pseudomonas aeruginosa", "Haemophilus influenzae"],
        "drugs": {
            "beta-lactam antibiotic": ["ceftriaxone", "amoxicillin", "piperacillin", "meropenem", "cefepime"],
            "macrolide": ["azithromycin", "clarithromycin", "erythromycin"],
            "glycopeptide": ["vancomycin", "teicoplanin"],
            "fluoroquinolone": ["levofloxacin", "moxifloxacin", "ciprofloxacin"],
        },
        "gene": ["TLR2", "MYD88", "NFKBIA", "IL10"],
        "symptom": ["productive cough", "pleuritic chest pain", "fever", "tachypnea", "rigors"],
        "anatomy": ["lower respiratory tract", "pleural space", "bronchioles", "lung parenchyma"],
        "procedure": ["blood cultures", "sputum culture", "chest radiography", "bronchoalveolar lavage"],
        "biomarker": ["procalcitonin", "lactate", "white blood cell count", "C-reactive protein"],
        "finding": ["lobar consolidation", "pleural effusion", "cavitation", "abscess formation"],
    },
    "tuberculosis": {
        "disease": ["tuberculosis", "latent tuberculosis infection", "multidrug-resistant tuberculosis",
                    "tuberculous meningitis", "miliary tuberculosis"],
        "pathogen": ["Mycobacterium tuberculosis", "Mycobacterium bovis", "nontuberculous mycobacteria"],
        "drugs": {
            "first-line antitubercular drug": ["isoniazid", "rifampicin", "pyrazinamide", "ethambutol"],
            "second-line antitubercular drug": ["bedaquiline", "pretomanid", "linezolid", "delamanid"],
        },
        "gene": ["IFNGR1", "IL12RB1", "katG", "rpoB", "inhA"],
        "symptom": ["night sweats", "hemoptysis", "weight loss", "chronic cough", "fever"],
        "anatomy": ["granulomas", "alveolar macrophages", "hilar lymph nodes", "upper lobes"],
        "procedure": ["sputum microscopy", "interferon-gamma release assay", "tuberculin skin test",
                      "GeneXpert testing"],
        "biomarker": ["acid-fast bacilli", "interferon-gamma", "adenosine deaminase"],
        "finding": ["caseating granulomas", "cavitary lesions", "hilar lymphadenopathy"],
    },
    "malaria": {
        "disease": ["malaria", "severe malaria", "cerebral malaria", "leishmaniasis", "schistosomiasis"],
        "pathogen": ["Plasmodium falciparum", "Plasmodium vivax", "Leishmania donovani", "Schistosoma mansoni"],
        "drugs": {
            "artemisinin derivative": ["artesunate", "artemether", "dihydroartemisinin"],
            "antimalarial": ["hydroxychloroquine", "chloroquine", "primaquine", "lumefantrine", "mefloquine"],
            "antiparasitic": ["praziquantel", "miltefosine", "amphotericin"],
        },
        "gene": ["PfKelch13", "PfCRT", "PfMDR1", "G6PD", "HBB"],
        "symptom": ["cyclical fever", "chills", "splenomegaly", "hepatomegaly", "anemia"],
        "anatomy": ["erythrocytes", "hepatocytes", "spleen", "cerebral microvasculature"],
        "procedure": ["thick blood smear", "rapid diagnostic test", "microscopy", "parasite culture"],
        "biomarker": ["parasitemia", "hemoglobin", "lactate", "histidine-rich protein 2"],
        "finding": ["sequestration", "hemozoin deposition", "hepatosplenomegaly"],
    },
    "glioblastoma": {
        "disease": ["glioblastoma", "astrocytoma", "oligodendroglioma", "glioma", "medulloblastoma"],
        "drugs": {
            "alkylating agent": ["temozolomide", "lomustine", "carmustine"],
            "angiogenesis inhibitor": ["bevacizumab", "ramucirumab"],
            "IDH inhibitor": ["vorasidenib", "ivosidenib"],
        },
        "gene": ["IDH1", "MGMT", "EGFRvIII", "TERT", "ATRX", "CDKN2A"],
        "symptom": ["headache", "seizures", "focal neurological deficits", "cognitive decline"],
        "anatomy": ["cerebral cortex", "white matter", "astrocytes", "blood-brain barrier"],
        "procedure": ["stereotactic biopsy", "maximal safe resection", "radiotherapy",
                      "contrast-enhanced magnetic resonance imaging"],
        "biomarker": ["MGMT promoter methylation", "Ki-67", "1p/19q codeletion"],
        "finding": ["necrosis", "microvascular proliferation", "peritumoral edema", "infiltration"],
    },
    "melanoma": {
        "disease": ["melanoma", "metastatic melanoma", "uveal melanoma", "Merkel cell carcinoma"],
        "drugs": {
            "checkpoint inhibitor": ["pembrolizumab", "nivolumab", "ipilimumab", "relatlimab"],
            "BRAF inhibitor": ["vemurafenib", "dabrafenib", "encorafenib"],
            "MEK inhibitor": ["trametinib", "cobimetinib", "binimetinib"],
        },
        "gene": ["BRAF", "NRAS", "CDKN2A", "KIT", "GNAQ"],
        "symptom": ["pigmented lesions", "pruritus", "ulceration", "lymphadenopathy"],
        "anatomy": ["melanocytes", "epidermis", "dermis", "sentinel lymph nodes"],
        "procedure": ["dermoscopy", "excisional biopsy", "sentinel lymph node biopsy", "immunohistochemistry"],
        "biomarker": ["lactate dehydrogenase", "programmed death-ligand 1", "tumor mutational burden"],
        "finding": ["Breslow thickness", "mitotic activity", "tumor-infiltrating lymphocytes"],
    },
    "lung adenocarcinoma": {
        "disease": ["lung adenocarcinoma", "non-small cell lung cancer", "squamous cell carcinoma",
                    "mesothelioma", "small cell lung cancer"],
        "drugs": {
            "EGFR inhibitor": ["osimertinib", "gefitinib", "erlotinib", "afatinib"],
            "ALK inhibitor": ["alectinib", "crizotinib", "lorlatinib", "brigatinib"],
            "platinum agent": ["cisplatin", "carboplatin", "pemetrexed"],
        },
        "gene": ["EGFR", "ALK", "KRAS", "ROS1", "MET", "STK11"],
        "symptom": ["persistent cough", "hemoptysis", "weight loss", "chest pain"],
        "anatomy": ["bronchial epithelium", "pleura", "mediastinal lymph nodes", "alveolar epithelium"],
        "procedure": ["low-dose computed tomography", "endobronchial ultrasound", "lobectomy",
                      "next-generation sequencing"],
        "biomarker": ["circulating tumor DNA", "carcinoembryonic antigen", "programmed death-ligand 1"],
        "finding": ["spiculated nodules", "lymphangitic spread", "pleural metastases"],
    },
    "breast cancer": {
        "disease": ["breast cancer", "triple-negative breast cancer", "ductal carcinoma in situ",
                    "invasive lobular carcinoma", "HER2-positive breast cancer"],
        "drugs": {
            "HER2-targeted therapy": ["trastuzumab", "pertuzumab", "lapatinib", "tucatinib"],
            "aromatase inhibitor": ["letrozole", "anastrozole", "exemestane"],
            "CDK4/6 inhibitor": ["palbociclib", "ribociclib", "abemaciclib"],
            "PARP inhibitor": ["olaparib", "talazoparib"],
        },
        "gene": ["BRCA1", "BRCA2", "ERBB2", "PIK3CA", "ESR1", "PALB2"],
        "symptom": ["breast mass", "nipple discharge", "skin dimpling", "axillary swelling"],
        "anatomy": ["mammary ducts", "lobules", "axillary lymph nodes", "luminal epithelium"],
        "procedure": ["mammography", "core needle biopsy", "mastectomy", "lumpectomy"],
        "biomarker": ["estrogen receptor", "progesterone receptor", "Ki-67", "cancer antigen 15-3"],
        "finding": ["microcalcifications", "architectural distortion", "lymphovascular invasion"],
    },
    "leukemia": {
        "disease": ["chronic myeloid leukemia", "acute myeloid leukemia", "acute lymphoblastic leukemia",
                    "multiple myeloma", "diffuse large B-cell lymphoma"],
        "drugs": {
            "tyrosine kinase inhibitor": ["imatinib", "dasatinib", "nilotinib", "ponatinib"],
            "proteasome inhibitor": ["bortezomib", "carfilzomib", "ixazomib"],
            "anti-CD20 antibody": ["rituximab", "obinutuzumab", "ofatumumab"],
            "hypomethylating agent": ["azacitidine", "decitabine"],
        },
        "gene": ["BCR-ABL1", "FLT3", "NPM1", "TP53", "MYC", "BCL2"],
        "symptom": ["fatigue", "recurrent infections", "bone pain", "night sweats", "lymphadenopathy"],
        "anatomy": ["bone marrow", "lymphoblasts", "plasma cells", "lymph nodes"],
        "procedure": ["flow cytometry", "bone marrow aspiration", "cytogenetic analysis",
                      "allogeneic stem cell transplantation"],
        "biomarker": ["blast percentage", "monoclonal protein", "minimal residual disease", "beta-2 microglobulin"],
        "finding": ["hypercellular marrow", "Philadelphia chromosome", "lytic lesions"],
    },
    "neurodegeneration": {
        "disease": ["Alzheimer disease", "Parkinson disease", "amyotrophic lateral sclerosis", "frontotemporal dementia",
                    "Huntington disease", "Lewy body dementia"],
        "drugs": {
            "cholinesterase inhibitor": ["donepezil", "rivastigmine", "galantamine"],
            "dopaminergic agent": ["levodopa", "carbidopa", "pramipexole", "ropinirole", "rasagiline"],
            "anti-amyloid antibody": ["lecanemab", "aducanumab", "donanemab"],
            "neuroprotective agent": ["riluzole", "edaravone", "tofersen"],
        },
        "gene": ["APOE", "APP", "PSEN1", "MAPT", "SNCA", "LRRK2", "SOD1", "C9orf72", "HTT"],
        "symptom": ["memory impairment", "bradykinesia", "resting tremor", "rigidity", "dysarthria", "chorea"],
        "anatomy": ["hippocampus", "substantia nigra", "motor neurons", "entorhinal cortex", "striatum", "microglia"],
        "procedure": ["positron emission tomography", "lumbar puncture", "deep brain stimulation",
                      "neuropsychological testing"],
        "biomarker": ["amyloid beta", "phosphorylated tau", "neurofilament light chain", "alpha-synuclein"],
        "finding": ["neuronal loss", "neurofibrillary tangles", "Lewy bodies", "cortical atrophy"],
    },
    "neuroinflammation": {
        "disease": ["multiple sclerosis", "neuromyelitis optica", "encephalitis", "meningitis",
                    "Guillain-Barre syndrome", "myasthenia gravis"],
        "drugs": {
            "disease-modifying therapy": ["natalizumab", "ocrelizumab", "fingolimod", "teriflunomide",
                                         "dimethyl fumarate"],
            "complement inhibitor": ["eculizumab", "ravulizumab", "inebilizumab"],
            "anticonvulsant": ["levetiracetam", "lamotrigine", "carbamazepine", "valproate"],
        },
        "gene": ["HLA-DRB1", "IL7R", "AQP4", "CHRNA1", "IL2RA"],
        "symptom": ["optic neuritis", "paresthesia", "spasticity", "diplopia", "neck stiffness", "ataxia"],
        "anatomy": ["myelin sheath", "oligodendrocytes", "spinal cord", "optic nerve", "neuromuscular junction"],
        "procedure": ["magnetic resonance imaging", "cerebrospinal fluid analysis", "electroencephalography",
                      "nerve conduction studies", "plasma exchange"],
        "biomarker": ["oligoclonal bands", "aquaporin-4 antibodies", "acetylcholine receptor antibodies"],
        "finding": ["demyelinating lesions", "gadolinium enhancement", "pleocytosis", "axonal loss"],
    },
    "diabetes": {
        "disease": ["type 2 diabetes", "type 1 diabetes", "diabetic ketoacidosis", "diabetic nephropathy",
                    "diabetic retinopathy", "obesity"],
        "drugs": {
            "SGLT2 inhibitor": ["empagliflozin", "dapagliflozin", "canagliflozin"],
            "GLP-1 receptor agonist": ["semaglutide", "liraglutide", "dulaglutide", "tirzepatide"],
            "DPP-4 inhibitor": ["sitagliptin", "linagliptin", "saxagliptin"],
            "biguanide": ["metformin", "phenformin"],
        },
        "gene": ["TCF7L2", "HNF1A", "GCK", "PPARG", "KCNJ11", "MC4R"],
        "symptom": ["polyuria", "polydipsia", "blurred vision", "hyperglycemia", "hypoglycemia"],
        "anatomy": ["pancreatic islets", "beta cells", "adipocytes", "skeletal muscle", "retina"],
        "procedure": ["oral glucose tolerance test", "continuous glucose monitoring", "bariatric surgery",
                      "fundoscopy"],
        "biomarker": ["glycated hemoglobin", "fasting plasma glucose", "C-peptide", "insulin resistance"],
        "finding": ["insulin resistance", "beta-cell dysfunction", "microaneurysms", "glomerular hyperfiltration"],
    },
    "thyroid": {
        "disease": ["hypothyroidism", "hyperthyroidism", "Graves disease", "Hashimoto thyroiditis",
                    "papillary thyroid carcinoma", "thyrotoxicosis"],
        "drugs": {
            "thyroid hormone": ["levothyroxine", "liothyronine"],
            "antithyroid drug": ["methimazole", "carbimazole", "propylthiouracil"],
            "kinase inhibitor": ["lenvatinib", "sorafenib", "selpercatinib"],
        },
        "gene": ["TSHR", "TPO", "TG", "RET", "BRAF", "CTLA4"],
        "symptom": ["goiter", "heat intolerance", "weight gain", "exophthalmos", "cold intolerance"],
        "anatomy": ["thyroid gland", "thyroid follicles", "pituitary gland", "orbital fibroblasts"],
        "procedure": ["thyroid ultrasound", "fine-needle aspiration", "radioiodine ablation", "thyroidectomy"],
        "biomarker": ["thyroid-stimulating hormone", "free thyroxine", "thyroglobulin", "thyroperoxidase antibodies"],
        "finding": ["lymphocytic infiltration", "follicular hyperplasia", "hypoechoic nodules"],
    },
    "autoimmune arthritis": {
        "disease": ["rheumatoid arthritis", "psoriatic arthritis", "ankylosing spondylitis", "juvenile arthritis",
                    "gout"],
        "drugs": {
            "TNF inhibitor": ["adalimumab", "infliximab", "etanercept", "certolizumab", "golimumab"],
            "JAK inhibitor": ["tofacitinib", "baricitinib", "upadacitinib", "filgotinib"],
            "conventional DMARD": ["methotrexate", "leflunomide", "sulfasalazine"],
            "urate-lowering therapy": ["allopurinol", "febuxostat", "pegloticase"],
        },
        "gene": ["HLA-DRB1", "HLA-B27", "PTPN22", "STAT4", "IL23R", "ABCG2"],
        "symptom": ["arthralgia", "morning stiffness", "joint swelling", "enthesitis", "dactylitis"],
        "anatomy": ["synovium", "articular cartilage", "sacroiliac joints", "tendons", "synovial fibroblasts"],
        "procedure": ["musculoskeletal ultrasound", "arthrocentesis", "synovial biopsy", "joint radiography"],
        "biomarker": ["rheumatoid factor", "anti-citrullinated protein antibodies", "erythrocyte sedimentation rate",
                      "serum urate"],
        "finding": ["synovitis", "erosions", "pannus formation", "tophi"],
    },
    "lupus": {
        "disease": ["systemic lupus erythematosus", "lupus nephritis", "antiphospholipid syndrome",
                    "Sjogren syndrome", "systemic sclerosis", "dermatomyositis"],
        "drugs": {
            "antimalarial": ["hydroxychloroquine", "chloroquine", "quinacrine"],
            "B-cell targeted therapy": ["belimumab", "rituximab", "obinutuzumab"],
            "type I interferon antagonist": ["anifrolumab", "sifalimumab"],
            "calcineurin inhibitor": ["voclosporin", "tacrolimus", "cyclosporine"],
        },
        "gene": ["IRF5", "STAT4", "TNFAIP3", "ITGAM", "C4A", "TREX1"],
        "symptom": ["malar rash", "photosensitivity", "oral ulcers", "Raynaud phenomenon", "sicca symptoms"],
        "anatomy": ["glomeruli", "salivary glands", "dermal capillaries", "plasmacytoid dendritic cells"],
        "procedure": ["kidney biopsy", "capillaroscopy", "salivary gland biopsy", "urinalysis"],
        "biomarker": ["antinuclear antibodies", "anti-dsDNA antibodies", "complement C3", "antiphospholipid antibodies"],
        "finding": ["immune complex deposition", "interface dermatitis", "vasculopathy", "proteinuria"],
    },
    "liver disease": {
        "disease": ["cirrhosis", "hepatitis C", "hepatitis B", "steatohepatitis", "hepatocellular carcinoma",
                    "hepatic encephalopathy"],
        "pathogen": ["hepatitis C virus", "hepatitis B virus", "hepatitis delta virus"],
        "drugs": {
            "direct-acting antiviral": ["sofosbuvir", "ledipasvir", "velpatasvir", "glecaprevir", "pibrentasvir"],
            "nucleoside analogue": ["tenofovir", "entecavir", "lamivudine"],
            "ammonia-lowering agent": ["rifaximin", "lactulose"],
        },
        "gene": ["PNPLA3", "TM6SF2", "HSD17B13", "HFE", "SERPINA1"],
        "symptom": ["jaundice", "ascites", "pruritus", "variceal bleeding", "asterixis"],
        "anatomy": ["hepatocytes", "hepatic stellate cells", "portal vein", "bile ducts", "Kupffer cells"],
        "procedure": ["transient elastography", "liver biopsy", "paracentesis", "liver transplantation"],
        "biomarker": ["alanine aminotransferase", "bilirubin", "albumin", "alpha-fetoprotein", "HCV RNA"],
        "finding": ["bridging fibrosis", "steatosis", "ballooning degeneration", "portal hypertension"],
    },
    "inflammatory bowel disease": {
        "disease": ["Crohn disease", "ulcerative colitis", "celiac disease", "Clostridioides difficile infection",
                    "microscopic colitis"],
        "pathogen": ["Clostridioides difficile", "Helicobacter pylori", "adherent-invasive Escherichia coli"],
        "drugs": {
            "anti-integrin antibody": ["vedolizumab", "natalizumab", "etrolizumab"],
            "aminosalicylate": ["mesalamine", "balsalazide", "olsalazine"],
            "interleukin inhibitor": ["ustekinumab", "risankizumab", "mirikizumab", "guselkumab"],
            "antibiotic": ["fidaxomicin", "metronidazole", "vancomycin"],
        },
        "gene": ["NOD2", "ATG16L1", "IL23R", "HLA-DQ2", "IRGM"],
        "symptom": ["abdominal pain", "diarrhea", "hematochezia", "tenesmus", "malabsorption"],
        "anatomy": ["terminal ileum", "colonic mucosa", "intestinal epithelium", "small intestine", "gut microbiota"],
        "procedure": ["colonoscopy", "capsule endoscopy", "magnetic resonance enterography", "ileocecal resection"],
        "biomarker": ["fecal calprotectin", "C-reactive protein", "tissue transglutaminase antibodies"],
        "finding": ["transmural inflammation", "crypt abscesses", "villous atrophy", "strictures", "fistulas"],
    },
    "kidney disease": {
        "disease": ["chronic kidney disease", "acute kidney injury", "glomerulonephritis", "nephrotic syndrome",
                    "IgA nephropathy", "polycystic kidney disease"],
        "drugs": {
            "vasopressin antagonist": ["tolvaptan", "lixivaptan"],
            "phosphate binder": ["sevelamer", "lanthanum", "ferric citrate"],
            "immunosuppressant": ["cyclophosphamide", "mycophenolate", "tacrolimus"],
            "SGLT2 inhibitor": ["dapagliflozin", "empagliflozin"],
        },
        "gene": ["PKD1", "PKD2", "APOL1", "NPHS1", "NPHS2", "COL4A5"],
        "symptom": ["proteinuria", "hematuria", "oliguria", "edema", "hyperkalemia"],
        "anatomy": ["glomeruli", "podocytes", "renal tubules", "nephrons", "glomerular basement membrane"],
        "procedure": ["hemodialysis", "peritoneal dialysis", "kidney biopsy", "renal transplantation"],
        "biomarker": ["serum creatinine", "estimated glomerular filtration rate", "cystatin C", "albuminuria"],
        "finding": ["podocyte effacement", "tubular atrophy", "interstitial fibrosis", "crescents"],
    },
}

# Cluster-independent fillers.
GENERIC: dict[str, list[str]] = {
    "design": ["randomized controlled trial", "retrospective cohort study", "prospective cohort study",
               "case-control study", "meta-analysis", "multicenter trial", "cross-sectional study",
               "phase 3 trial", "double-blind trial", "systematic review"],
    "population": ["children", "older adults", "pregnant women", "adolescents", "hospitalized patients",
                   "outpatients", "immunocompromised patients", "postmenopausal women", "smokers",
                   "critically ill patients", "transplant recipients", "healthcare workers"],
    "outcome": ["mortality", "hospitalization", "disease progression", "relapse", "symptom burden",
                "length of stay", "readmission", "overall survival", "progression-free survival",
                "quality of life", "time to recovery"],
    "duration": ["12 weeks", "six months", "one year", "two years", "28 days", "48 weeks", "five years"],
    "adverse": ["nausea", "hepatotoxicity", "nephrotoxicity", "neutropenia", "rash", "diarrhea", "headache",
                "hypotension", "QT prolongation", "infusion reactions", "hyperkalemia", "pancreatitis",
                "opportunistic infections"],
    "risk": ["smoking", "obesity", "advanced age", "hypertension", "physical inactivity", "family history",
             "air pollution", "male sex", "socioeconomic deprivation"],
    "model": ["mice", "rats", "zebrafish", "organoids", "patient-derived xenografts", "cell lines",
              "nonhuman primates"],
    "change": ["increased", "decreased", "reduced", "improved", "worsened", "stabilized"],
    "direction": ["upregulated", "downregulated", "overexpressed", "silenced"],
}

TEMPLATES: list[str] = [
    "Patients with {disease} frequently present with {symptom} and {symptom2}.",
    "{drug} is {a_drug_class} used in the treatment of {disease}.",
    "In a {design} of {n} patients with {disease}, {drug} reduced {outcome} by {pct}%.",
    "Mutations in {gene} are associated with {disease}.",
    "Variants of {gene} increase susceptibility to {disease}, particularly in {population}.",
    "{procedure} showed {finding} of the {anatomy} in patients with {disease}.",
    "Elevated {biomarker} predicted {outcome} in {population} with {disease}.",
    "Treatment with {drug} or {drug2} {change} {symptom} in {population} with {disease}.",
    "{drug_class_plural} such as {drug} and {drug2} are first-line therapy for {disease}.",
    "{gene} is highly expressed in the {anatomy}.",
    "Loss of {gene} function leads to {disease} with early {symptom}.",
    "{disease} was diagnosed by {procedure} and confirmed by measurement of {biomarker}.",
    "Adverse events of {drug} included {adverse} and {adverse2}.",
    "{drug} did not significantly reduce {outcome} in hospitalized patients with {disease}.",
    "Compared with placebo, {drug} lowered {biomarker} after {duration} of treatment.",
    "{disease} is characterized by {symptom}, {symptom2} and abnormal {biomarker}.",
    "We identified a novel {gene} mutation in a family with {disease}.",
    "{gene} was {direction} in the {anatomy} of {model} with experimental {disease}.",
    "Early {procedure} is recommended for patients with suspected {disease}.",
    "Among {n} patients with {disease}, {pct}% developed {disease2} within {duration}.",
    "{disease} and {disease2} share risk factors such as {risk} and {risk2}.",
    "The efficacy of {drug} in {disease} was evaluated in a {design}.",
    "{symptom} is a common early sign of {disease}.",
    "Patients receiving {a_drug_class} should be monitored for {adverse}.",
    "{drug} inhibits {gene} signaling and slows the progression of {disease}.",
    "Switching from {drug} to {drug2} {change} {biomarker} in patients with {disease}.",
    "The combination of {drug} and {other_drug} was well tolerated in {population}.",
    "{finding} in the {anatomy} is a hallmark of {disease}.",
    "In {model}, deletion of {gene} caused {finding} and {symptom}.",
    "Levels of {biomarker} correlated with {finding} on {procedure}.",
    "Guidelines recommend {drug} for {disease} when {drug2} is not tolerated.",
    "A {design} found that {drug_class_plural} {change} {outcome} in {disease}.",
    "{disease} remains a leading cause of {outcome} among {population}.",
    "Polymorphisms in {gene} and {gene2} modify the response to {drug}.",
    "Injury to the {anatomy} is central to the pathogenesis of {disease}.",
    "Infection with {pathogen} causes {disease} and damages the {anatomy}.",
    "{pathogen} was detected in {n} of {m} samples from patients with {disease}.",
    "Resistance of {pathogen} to {drug} has been reported in several regions.",
    "{drug} is active against {pathogen} in vitro and in {model}.",
    "{pathogen} enters cells through {gene} and causes {symptom} and {symptom2}.",
    "Patients infected with {pathogen} often develop {symptom} within {duration}.",
]

_SLOT = re.compile(r"\{(\w+?)(\d?)\}")


def _plural(phrase: str) -> str:
    head, _, last = phrase.rpartition(" ")
    if last.endswith(("y",)) and not last.endswith(("ay", "ey", "oy")):
        last = last[:-1] + "ies"
    elif last.endswith(("s", "x", "ch", "sh")):
        last += "es"
    else:
        last += "s"
    return f"{head} {last}".strip()


def _article(phrase: str) -> str:
    first = phrase.split()[0].split("-")[0]
    vowel_sound = (first[:1] in "aeio" or first in ("SGLT2", "IDH", "ALK", "EGFR")) and first != "urate"
    return "an" if vowel_sound else "a"


def _capitalize(text: str) -> str:
    # "remdesivir ..." -> "Remdesivir ..."; symbols with capitals inside ("rpoB", "SARS-CoV-2") keep their case.
    first_word = text.split(" ", 1)[0]
    return text[:1].upper() + text[1:] if first_word.islower() else text


def sentences(seed: int) -> Iterator[str]:
    """An endless, seeded stream of sentences."""
    rng = random.Random(seed)
    names = sorted(CLUSTERS)
    usable = {
        name: [t for t in TEMPLATES if all(_has_slot(CLUSTERS[name], slot) for slot, _ in _SLOT.findall(t))]
        for name in names
    }
    while True:
        name = rng.choice(names)
        cluster = CLUSTERS[name]
        template = rng.choice(usable[name])
        drug_classes: dict[str, list[str]] = cluster["drugs"]  # type: ignore[assignment]
        drug_class = rng.choice(sorted(drug_classes))
        used: dict[str, list[str]] = {}

        def fill(match: re.Match[str]) -> str:
            name = match.group(1)
            if name == "n":
                return str(rng.randint(40, 4000))
            if name == "m":
                return str(rng.randint(4001, 9000))
            if name == "pct":
                return str(rng.randint(5, 60))
            if name == "drug_class":
                return drug_class
            if name == "a_drug_class":
                return f"{_article(drug_class)} {drug_class}"
            if name == "drug_class_plural":
                return _plural(drug_class)
            if name == "drug":
                pool = drug_classes[drug_class]
            elif name == "other_drug":
                pool = [d for c in sorted(drug_classes) if c != drug_class for d in drug_classes[c]]
            else:
                pool = cluster.get(name) or GENERIC[name]  # type: ignore[assignment]
            taken = used.setdefault(name, [])
            choices = [w for w in pool if w not in taken] or list(pool)
            word = rng.choice(choices)
            taken.append(word)
            return word

        yield _capitalize(_SLOT.sub(fill, template))


def _has_slot(cluster: dict[str, object], name: str) -> bool:
    return name in ("n", "m", "pct", "drug", "other_drug", "drug_class", "a_drug_class", "drug_class_plural") or name in cluster or name in GENERIC


def generate(seed: int = DEFAULT_SEED, tokens: int = DEFAULT_TOKENS) -> list[str]:
    """Sentences until about ``tokens`` word and punctuation tokens are reached."""
    out: list[str] = []
    count = 0
    for sentence in sentences(seed):
        out.append(sentence)
        count += len(TOKEN_RE.findall(sentence))
        if count >= tokens:
            return out
    return out


def write(path: Path, lines: list[str]) -> None:
    data = ("\n".join(lines) + "\n").encode("utf-8")
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz:
        gz.write(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("sample.txt.gz"))
    parser.add_argument("--tokens", type=int, default=DEFAULT_TOKENS)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)
    lines = generate(args.seed, args.tokens)
    write(args.out, lines)
    sys.stderr.write(f"wrote {len(lines)} sentences to {args.out} ({args.out.stat().st_size:,} bytes)\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
