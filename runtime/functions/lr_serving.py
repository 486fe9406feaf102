"""lr_serving: sentiment classification of reviews with a pre-trained TF-IDF +
logistic regression model (FunctionBench / vHive `lr_serving`, scikit-learn)."""
import hashlib
import pickle

MODEL = "/opt/thaw/inputs/lr_serving/model.pkl"
_model = None


def init():
    global _model
    import sklearn.linear_model  # noqa: F401  (import cost belongs to the cold start)

    with open(MODEL, "rb") as f:
        _model = pickle.load(f)


def handler(event):
    with open(event["path"], "rb") as f:
        reviews = f.read().decode("utf-8").split("\n")
    pred = _model.predict(reviews)
    bits = "".join("1" if p else "0" for p in pred)
    return {
        "n": len(reviews),
        "positive": bits.count("1"),
        "predictions": bits,
        "predictions_sha256": hashlib.sha256(bits.encode()).hexdigest(),
    }
