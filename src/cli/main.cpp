int main() { return 0; }  // the real CLI lands once the zoo and formats exist
