def run(root):
    pass
