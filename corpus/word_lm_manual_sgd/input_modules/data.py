import torch


class Dictionary(object):
    def __init__(self):
        self.word2idx = {}
        self.idx2word = []

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


class Corpus(object):
    """pytorch/examples word_language_model/data.py, reading generated sentences instead of wikitext-2 files."""

    def __init__(self, seed):
        self.dictionary = Dictionary()
        self.train = self.tokenize(self.sentences(400, seed))
        self.valid = self.tokenize(self.sentences(60, seed + 1))
        self.test = self.tokenize(self.sentences(60, seed + 2))

    @staticmethod
    def sentences(n, seed):
        g = torch.Generator().manual_seed(seed)
        subjects, verbs, objects = ["the cat", "a dog", "my friend", "the bird"], ["sees", "likes", "follows"], ["the ball", "a tree", "the river", "her"]
        lines = []
        for _ in range(n):
            s, v, o = (int(torch.randint(0, len(w), (1,), generator=g)) for w in (subjects, verbs, objects))
            lines.append(f"{subjects[s]} {verbs[v]} {objects[o]}")
        return lines

    def tokenize(self, lines):
        """Tokenizes the lines of a text."""
        idss = []
        for line in lines:
            words = line.split() + ['<eos>']
            ids = [self.dictionary.add_word(word) for word in words]
            idss.append(torch.tensor(ids).type(torch.int64))
        return torch.cat(idss)
