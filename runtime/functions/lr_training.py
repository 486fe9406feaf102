"""lr_training: train a TF-IDF + logistic regression sentiment model on a review
dataset (FunctionBench / vHive `lr_training`, scikit-learn)."""
import json
import pickle

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression


def handler(event):
    with open(event["path"], "rb") as f:
        rows = [json.loads(line) for line in f.read().decode("utf-8").splitlines()]
    texts = [r["text"] for r in rows]
    labels = np.array([r["label"] for r in rows])
    split = int(len(rows) * 0.8)
    vec = TfidfVectorizer()
    x_train = vec.fit_transform(texts[:split])
    model = LogisticRegression(max_iter=200, random_state=0)
    model.fit(x_train, labels[:split])
    train_acc = float(model.score(x_train, labels[:split]))
    holdout_acc = float(model.score(vec.transform(texts[split:]), labels[split:]))
    vocab = vec.get_feature_names_out()
    coef = model.coef_[0]
    order = np.argsort(coef)
    blob = pickle.dumps((vec, model))
    return {
        "n_samples": len(rows),
        "n_train": split,
        "n_features": int(len(vocab)),
        "train_accuracy": train_acc,
        "holdout_accuracy": holdout_acc,
        "top_positive": [str(vocab[i]) for i in order[::-1][:10]],
        "top_negative": [str(vocab[i]) for i in order[:10]],
        "model_bytes": len(blob),
    }
