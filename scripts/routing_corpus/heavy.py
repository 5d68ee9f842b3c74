"""The tasks that need reasoning (see ``asks.py`` for the template format)."""

from __future__ import annotations

from routing_corpus.tasks import make_task

HEAVY = [
    make_task("word_problem", True, None, """
        en: A train leaves {city} at 8:00 going {n2} km/h; another leaves {city2}, {n5} km away, at 9:00 going {n3}0 km/h toward it. When and where do they meet?
        en: {name} can paint a fence in {n1} hours and {name2} in {n3} hours. Working together after {name} has already done an hour alone, how long until it's finished?
        en: A shop raises a price by {n3}% and later cuts it by {n3}%. A customer says it's back to the original. Is that right, and what is the net change?
        en: I invest {n6} dollars at {n4}% a year compounded monthly and add {n2} every month. What do I have after {n1} years? Show the working.
        en: A tank holds {n5} litres. One pipe fills it in {n3} minutes, a drain empties it in {n2} minutes. Starting half full with both open, when is it full?
        en: {name} is {n4} times as old as her son; in {n3} years she'll be twice as old. How old are they now?
        en: A car uses {n4}.5 litres per 100 km in town and {n4} on the highway. A {n5} km trip is {n3}% town. Fuel at {n6} rupiah a litre: total cost?
        en: Three workers produce {n2}, {n3} and {n5} parts an hour, with defect rates {n4}%, {n1}% and 1%. What share of defective parts comes from the second worker?
        en: If the bill is {n6} and we split it so that {name} pays twice what {name2} pays and {name3} pays {n2} less than {name}, who pays what?
        id: Kereta dari {city} berangkat pukul 08.00 dengan kecepatan {n2} km/jam, kereta lain dari {city2} yang berjarak {n5} km berangkat pukul 09.00 dengan {n3}0 km/jam ke arah berlawanan. Kapan dan di mana mereka bertemu?
        id: {name} bisa mengecat pagar dalam {n1} jam, {name2} dalam {n3} jam. Kalau {name} sudah kerja sendiri satu jam dulu, berapa lama lagi selesai kalau dikerjakan berdua?
        id: Harga barang naik {n3}% lalu turun {n3}%. Apakah harganya kembali seperti semula? Berapa perubahan bersihnya?
        id: Saya menabung {n6} ribu dengan bunga {n4}% per tahun dimajemukkan bulanan, plus setoran {n2} ribu tiap bulan. Berapa saldo setelah {n1} tahun?
        id: Tangki berisi {n5} liter. Keran mengisi penuh dalam {n3} menit, saluran pembuangan mengosongkan dalam {n2} menit. Mulai setengah penuh dan keduanya terbuka, kapan penuh?
        id: Umur ibu {n4} kali umur anaknya; {n3} tahun lagi umurnya dua kali umur anak. Berapa umur mereka sekarang?
        id: Kalau tagihan {n6} ribu dibagi sehingga {name} bayar dua kali {name2}, dan {name3} bayar {n2} ribu lebih sedikit dari {name}, masing-masing bayar berapa?
        id: Sebuah toko memberi diskon {n3}% lalu diskon tambahan {n1}% dari harga setelah diskon. Apakah sama dengan diskon {n3}+{n1} persen? Jelaskan selisihnya.
        mx: Kalau aku lari {n1} km per hari dan tiap minggu nambah {n4}%, kapan aku tembus {n2} km per minggu? Pls hitungin.
        mx: Gaji aku {n6} ribu, naik {n4}% tiap tahun, inflasi {n1}%. Real income-nya setelah {n3} tahun naik atau turun berapa persen?
    """),
    make_task("probability", True, None, """
        en: I roll two dice. What's the probability the product is even?
        en: Out of {n2} people, what's the chance at least two share a birthday? Roughly, and how did you get it?
        en: A bag has {n1} red and {n3} blue marbles. I draw three without replacement. Probability of exactly two red?
        en: How many ways can {n1} people sit around a round table if two of them refuse to sit together?
        en: A test is 99% accurate and the disease affects 1 in {n5}. I tested positive. How worried should I be?
        en: How many distinct arrangements of the letters in {word} are there?
        en: If I flip a coin until I get two heads in a row, how many flips do I expect?
        id: Dua dadu dilempar. Berapa peluang hasil kalinya genap?
        id: Dari {n2} orang, berapa peluang minimal dua orang ulang tahunnya sama?
        id: Kantong berisi {n1} kelereng merah dan {n3} biru. Diambil tiga sekaligus, peluang tepat dua merah?
        id: Ada berapa cara {n1} orang duduk melingkar kalau dua orang tidak mau bersebelahan?
        id: Tes akurat 99%, penyakitnya diderita 1 dari {n5} orang. Saya positif. Seberapa besar kemungkinan saya benar-benar sakit?
        id: Berapa banyak susunan berbeda dari huruf-huruf kata {word}?
        id: Koin dilempar terus sampai muncul dua gambar berturut-turut. Rata-rata butuh berapa lemparan?
        mx: Peluang dapet minimal satu angka 6 kalau lempar dadu {n4} kali berapa? Jelasin caranya.
    """),
    make_task("proof", True, None, """
        en: Prove that the square root of 2 is irrational.
        en: Show that the sum of the first n odd numbers is n squared.
        en: Prove there are infinitely many primes of the form 4k+3.
        en: Is it true that every graph with n vertices and n edges has a cycle? Prove or give a counterexample.
        en: Prove by induction that 3^n - 1 is even for all n >= 1.
        en: Show that among any {n4} integers, two have a difference divisible by {n1}.
        id: Buktikan bahwa akar 2 adalah bilangan irasional.
        id: Tunjukkan bahwa jumlah n bilangan ganjil pertama sama dengan n kuadrat.
        id: Buktikan dengan induksi bahwa 5^n - 1 habis dibagi 4.
        id: Benarkah setiap graf dengan n simpul dan n sisi punya siklus? Buktikan atau beri contoh penyangkal.
        id: Buktikan tidak ada bilangan bulat x sehingga x^2 = 4k + 3.
        id: Tunjukkan bahwa hasil kali tiga bilangan bulat berurutan selalu habis dibagi 6.
        mx: Tolong prove kalau n^3 - n selalu habis dibagi 6.
    """),
    make_task("short_puzzle", True, None, """
        en: Is {big} prime?
        en: Which is bigger, 2^{n2} or 3^{n3}?
        en: How many trailing zeros does {n5}! have?
        en: Remainder of 7^{n5} divided by {n4}?
        en: What's the last digit of 3^{n6}?
        en: Smallest number divisible by every integer from 1 to {n1}?
        en: I have {n4} coins totalling {n2} cents, no pennies. What are they?
        en: Clock shows 3:{n3}. Angle between the hands?
        id: Apakah {big} bilangan prima?
        id: Mana yang lebih besar, 2^{n2} atau 3^{n3}?
        id: {n5}! punya berapa angka nol di belakang?
        id: Sisa pembagian 7^{n5} oleh {n4}?
        id: Angka satuan dari 3^{n6} berapa?
        id: Bilangan terkecil yang habis dibagi semua bilangan 1 sampai {n1}?
        id: Jam menunjukkan pukul 3.{n3}. Sudut antara jarum jam dan menitnya berapa?
        mx: {big} itu prima nggak sih?
    """),
    make_task("logic_puzzle", True, None, """
        en: On an island, knights always tell the truth and knaves always lie. A says "B is a knave", B says "A and I are the same kind". What are they?
        en: Five houses in a row: the red one is left of the green one, the blue one is at an end, the yellow is in the middle, the white is next to the blue. Order?
        en: {name}, {name2} and {name3} each own one pet: a cat, a dog, a fish. {name} is allergic to fur, {name2} doesn't own the dog. Who owns what?
        en: A farmer must cross a river with a wolf, a goat and a cabbage; the boat holds one item. How?
        en: You have 8 balls, one heavier, and a balance. Fewest weighings to find it, and the procedure?
        en: Two doors, two guards, one lies and one tells the truth. One question to find the safe door?
        id: Di sebuah pulau, ksatria selalu jujur dan penipu selalu bohong. A bilang "B penipu", B bilang "aku dan A sejenis". Siapa apa?
        id: {name}, {name2}, dan {name3} masing-masing punya satu hewan: kucing, anjing, ikan. {name} alergi bulu, {name2} tidak punya anjing. Siapa punya apa?
        id: Petani harus menyeberangkan serigala, kambing, dan kubis; perahu hanya muat satu. Bagaimana caranya?
        id: Ada 8 bola, satu lebih berat, dan timbangan dua lengan. Paling sedikit berapa kali menimbang?
        id: Lima rumah berjajar: merah di kiri hijau, biru di ujung, kuning di tengah, putih di sebelah biru. Urutannya?
        id: Dua pintu dijaga dua penjaga, satu selalu bohong. Satu pertanyaan apa yang menjamin kita tahu pintu aman?
        mx: Ada puzzle: 3 saklar di luar, 1 lampu di dalam ruangan, cuma boleh masuk sekali. Gimana tau saklar yang mana?
    """),
    make_task("debug", True, "trace", """
        en: This crashes in production but never locally. What's the root cause and how do I fix it properly?
        en: Why does this happen? I already checked the input isn't empty at the call site.
        en: We get this intermittently under load. Walk me through what could cause it and how to fix it.
        en: I've been stuck on this for hours. Find the bug.
        en: Here's the code and the error. What's wrong and what's the cleanest fix?
        en: Something is off here, tests pass but this shows up in the logs every few hours. Ideas?
        id: Ini crash di production tapi aman di lokal. Penyebab utamanya apa dan cara benerinnya gimana?
        id: Kenapa bisa begini? Input-nya sudah saya pastikan tidak kosong.
        id: Error ini muncul sesekali saat beban tinggi. Kira-kira penyebabnya apa dan solusinya?
        id: Sudah berjam-jam saya cari bug-nya nggak ketemu. Tolong dong.
        id: Ini kode dan error-nya. Salahnya di mana dan perbaikan yang paling bersih gimana?
        id: Tes lolos semua tapi log ini muncul tiap beberapa jam. Ada ide?
        mx: Tolong debug ini dong, kenapa error terus padahal logic-nya udah bener?
        mx: This keeps failing, aku udah coba restart service tapi tetep. Root cause-nya apa?
    """),
    make_task("code_reasoning", True, "code", """
        en: Can this deadlock? If so, show the interleaving and fix it.
        en: What's the time complexity of this, and can it be done faster?
        en: There's a subtle bug in this. Find it and explain when it triggers.
        en: Is this thread-safe? Explain exactly what could go wrong.
        en: This returns the wrong result for some inputs. Which ones, and why?
        en: Review this for correctness under concurrent access and suggest a design that scales.
        id: Apakah kode ini bisa deadlock? Kalau iya, tunjukkan urutan kejadiannya dan perbaikannya.
        id: Kompleksitas waktunya berapa, dan bisa dibuat lebih cepat?
        id: Ada bug halus di sini. Temukan dan jelaskan kapan terjadinya.
        id: Ini aman dipakai banyak thread nggak? Jelaskan apa yang bisa salah.
        id: Hasilnya salah untuk input tertentu. Input yang mana dan kenapa?
        id: Review kebenarannya kalau diakses bersamaan, lalu usulkan desain yang lebih scalable.
        mx: Kenapa function ini kadang return hasil yang salah? Edge case-nya apa?
    """),
    make_task("algorithm", True, None, """
        en: Design an algorithm to find the k most frequent words in a 50 GB log with 2 GB of RAM.
        en: Implement an LRU cache with O(1) get and put, and explain why it's O(1).
        en: Given a list of meetings with start and end times, find the minimum number of rooms. Code and complexity please.
        en: Write a function that returns the longest palindromic substring, better than O(n^3).
        en: How would you detect a cycle in a linked list using constant memory? Prove it works.
        en: Write a rate limiter that allows {n2} requests per minute per user across several servers.
        id: Rancang algoritma untuk mencari k kata paling sering dari log 50 GB dengan RAM 2 GB.
        id: Implementasikan LRU cache dengan get dan put O(1), jelaskan kenapa O(1).
        id: Diberikan daftar rapat dengan jam mulai dan selesai, cari jumlah ruangan minimum. Kode dan kompleksitasnya.
        id: Buat fungsi yang mencari substring palindrom terpanjang, lebih cepat dari O(n^3).
        id: Bagaimana mendeteksi siklus pada linked list dengan memori konstan? Buktikan benar.
        id: Buat rate limiter {n2} request per menit per pengguna yang jalan di beberapa server.
        mx: Gimana cara implement autocomplete yang cepat buat 10 juta kata? Jelasin struktur datanya.
    """),
    make_task("planning", True, None, """
        en: Plan a 4-day trip to {city} and {city2} for two people on {n6} thousand rupiah total, no flights before 9am, and one day must be free for a wedding.
        en: I have five tasks: A takes 2 days, B 3 days and needs A, C 1 day, D needs B and C, E needs D. Two people. Shortest schedule?
        en: Schedule interviews for 6 candidates with 3 interviewers; each candidate sees two interviewers, nobody does more than 4, and {name} is only free in the afternoon.
        en: We must migrate our database with under 5 minutes of downtime, 2 TB of data and a replica that lags 30 s. Give me a step-by-step plan with rollback points.
        en: My flight lands at 14:50, the connection leaves at 16:05 from another terminal, the transfer takes 40 min and immigration up to 45. Should I risk it or rebook?
        en: Allocate a {n6} dollar marketing budget across search, social and events given last year's returns of 3x, 2x and 1.5x, with at least 20% on events.
        id: Rencanakan liburan 4 hari ke {city} dan {city2} untuk berdua dengan total {n6} ribu, tidak ada penerbangan sebelum jam 9, dan satu hari harus kosong untuk kondangan.
        id: Ada lima tugas: A 2 hari, B 3 hari dan butuh A, C 1 hari, D butuh B dan C, E butuh D. Ada dua orang. Jadwal tercepatnya?
        id: Atur jadwal wawancara 6 kandidat dengan 3 pewawancara; tiap kandidat ketemu dua pewawancara, tak ada yang lebih dari 4, dan {name} hanya bisa sore.
        id: Kami harus migrasi database 2 TB dengan downtime di bawah 5 menit dan replika tertinggal 30 detik. Buat rencana langkah demi langkah dengan titik rollback.
        id: Pesawat saya mendarat 14.50, sambungan berangkat 16.05 dari terminal lain, pindah terminal 40 menit, imigrasi bisa 45 menit. Nekat atau ganti jadwal?
        id: Bagi anggaran pemasaran {n6} ribu ke iklan search, sosmed, dan event dengan imbal hasil tahun lalu 3x, 2x, 1,5x, minimal 20% untuk event.
        mx: Bantu susun jadwal belajar 6 minggu buat ujian, ada 4 mata kuliah, weekend cuma bisa 3 jam. Prioritas yang paling berat dulu.
    """),
    make_task("estimation", True, None, """
        en: Roughly how many piano tuners are there in Jakarta? Walk through your assumptions.
        en: Estimate how much storage a year of chat logs takes for an app with {n2} thousand daily users.
        en: How many litres of water does {city} use per day? Give an order-of-magnitude estimate with reasoning.
        en: Ballpark how many GPUs we'd need to serve {n5} requests per second of a 7B model.
        id: Kira-kira ada berapa tukang ojek di Jakarta? Jelaskan asumsimu.
        id: Perkirakan kapasitas penyimpanan log chat setahun untuk aplikasi dengan {n2} ribu pengguna harian.
        id: Berapa liter air dipakai kota {city} per hari? Perkiraan kasar dengan alasannya.
        id: Kira-kira butuh berapa GPU untuk melayani {n5} request per detik model 7B?
    """),
    make_task("tradeoff", True, None, """
        en: We're choosing between Postgres and DynamoDB for an order system with strong consistency needs and spiky traffic. Weigh it and recommend one.
        en: Should we build our own auth or use a managed provider? Team of 4, B2B SaaS, SOC2 next year. Reason it through.
        en: Monorepo or polyrepo for 12 services and 3 teams? Consider CI time, ownership and releases.
        en: Is it worth rewriting our Python billing service in Go? It handles {n2} requests per second and the team knows Python.
        id: Kami memilih antara Postgres dan DynamoDB untuk sistem pesanan yang butuh konsistensi kuat dan trafik naik turun. Timbang dan rekomendasikan.
        id: Lebih baik bikin autentikasi sendiri atau pakai layanan terkelola? Tim 4 orang, SaaS B2B, audit tahun depan.
        id: Monorepo atau polyrepo untuk 12 layanan dan 3 tim? Pertimbangkan waktu CI, kepemilikan, dan rilis.
        id: Layak nggak menulis ulang layanan billing Python kami ke Go? Bebannya {n2} request per detik dan tim lebih paham Python.
        mx: Mending pakai Kafka atau RabbitMQ buat event sourcing kita? Pertimbangkan ordering dan replay.
    """),
    make_task("doc_reasoning", True, "prose", """
        en: Based on this, if someone starts on the {day} and works only early shifts, how do their weekly hours change? Show the reasoning.
        en: Are there any contradictions or gaps in this text? Reason carefully.
        en: What are the likely second-order consequences of what's described here, and which is the biggest risk?
        en: Given this, would an employee who works from Bali for three weeks in two trips break the rules? Work through each condition.
        en: Which claims here are supported by the evidence given and which are not? Justify each.
        en: If we accepted every change requested here, what would our cash flow look like over the next quarter compared to now?
        id: Berdasarkan teks ini, kalau seseorang mulai tanggal {day} dan hanya ambil shift pagi, jam kerjanya per minggu berubah bagaimana? Jelaskan alasannya.
        id: Apakah ada kontradiksi atau celah dalam teks ini? Analisis dengan teliti.
        id: Apa dampak lanjutan yang mungkin terjadi dari hal ini, dan mana risiko terbesarnya?
        id: Dengan aturan ini, apakah karyawan yang kerja dari Bali tiga minggu dalam dua kali perjalanan melanggar? Periksa tiap syaratnya.
        id: Klaim mana di sini yang didukung bukti dan mana yang tidak? Beri alasan masing-masing.
        id: Kalau semua perubahan yang diminta di sini kita terima, arus kas kuartal depan jadi seperti apa dibanding sekarang?
        mx: Dari dokumen ini, kalau kita setuju semua request-nya, risk terbesar buat kita apa? Analisis step by step.
    """),
    make_task("table_reasoning", True, "table", """
        en: Which row grew the most from the first to the last column in percentage terms, and is the trend consistent?
        en: Based on these numbers, what should we prioritise next quarter and why?
        en: Find the outlier here and explain whether it's likely a data error or a real effect.
        en: If each value grows by its average rate so far, which row overtakes which, and when?
        en: Compute the weighted average of the last column, weighted by the second, and tell me which rows pull it down most.
        id: Baris mana yang tumbuh paling besar dari kolom pertama ke terakhir dalam persen, dan apakah trennya konsisten?
        id: Berdasarkan angka-angka ini, apa yang harus jadi prioritas kuartal depan dan mengapa?
        id: Cari pencilannya dan jelaskan apakah itu kesalahan data atau efek nyata.
        id: Kalau tiap nilai tumbuh dengan laju rata-ratanya, baris mana yang menyalip baris lain dan kapan?
        id: Hitung rata-rata tertimbang kolom terakhir dengan bobot kolom kedua, lalu baris mana yang paling menurunkannya?
        mx: Dari data ini, which item harus di-reorder duluan dan kenapa? Hitung juga kapan stoknya habis.
    """),
    make_task("tool_plan", True, "tools", """
        en: Find me the cheapest way to visit {city}, {city2} and Bali in any order next month, staying two nights each, and book a slot with {name} after I'm back.
        en: Which of our customers in {city} ordered more this quarter than last, and draft an email to the top three explaining the new loyalty tiers?
        en: Figure out why refunds spiked last week: check the orders, the tickets and the docs, then summarise the root cause.
        en: Plan a team offsite for 8 people in {city}: check everyone's calendar, the weather for candidate dates and flight prices, and propose the best date.
        id: Carikan cara termurah mengunjungi {city}, {city2}, dan Bali urutan bebas bulan depan, masing-masing dua malam, lalu jadwalkan ketemu {name} setelah pulang.
        id: Pelanggan mana di {city} yang ordernya kuartal ini lebih banyak dari kuartal lalu? Lalu buat draf email ke tiga teratas soal tingkat loyalitas baru.
        id: Cari tahu kenapa refund melonjak minggu lalu: cek pesanan, tiket, dan dokumentasi, lalu simpulkan penyebabnya.
        id: Rencanakan outing tim 8 orang di {city}: cek kalender semua orang, cuaca di tanggal kandidat, dan harga tiket, lalu usulkan tanggal terbaik.
    """),
    make_task("json_reasoning", True, None, """
        en: Solve: a rectangle's perimeter is {n2} and its area is {n5}. Find its sides. Answer as {"sides": [...], "steps": [...]}.
        en: Decide whether {big} is prime and return {"prime": bool, "reason": str}.
        en: Schedule these: A(2h, before B), B(1h), C(3h, not after 15:00), start 9:00. Return {"schedule": [...]}.
        id: Keliling persegi panjang {n2} dan luasnya {n5}. Cari panjang sisinya. Jawab sebagai {"sisi": [...], "langkah": [...]}.
        id: Tentukan apakah {big} prima, kembalikan {"prima": bool, "alasan": str}.
        id: Jadwalkan: A(2 jam, sebelum B), B(1 jam), C(3 jam, tidak setelah 15.00), mulai 09.00. Kembalikan {"jadwal": [...]}.
    """, json_mode=True),
    make_task("followup_heavy", True, "history", """
        en: OK, and what if the second train leaves 20 minutes later? Work it out again.
        en: Now prove it holds for every n, not just the examples.
        en: But why does that fix the race? Step through the interleaving.
        en: Fine, now do the same but with three people and the constraint that nobody works two days in a row.
        en: Hmm, your answer doesn't match mine (I got 0.42). Which of us is wrong and where?
        en: Now generalise it: what's the answer for n dice instead of two?
        id: Oke, kalau kereta kedua berangkat 20 menit lebih lambat gimana? Hitung ulang.
        id: Sekarang buktikan berlaku untuk semua n, bukan cuma contoh.
        id: Tapi kenapa itu memperbaiki race condition-nya? Uraikan urutan kejadiannya.
        id: Sekarang lakukan hal yang sama untuk tiga orang dengan syarat tidak ada yang kerja dua hari berturut-turut.
        id: Jawabanmu beda sama punyaku (aku dapat 0,42). Siapa yang salah dan di langkah mana?
        id: Sekarang buat umum: jawabannya untuk n dadu, bukan dua?
        mx: Wait, kalau constraint-nya diganti jadi maksimal 3 orang per ruangan, hasilnya berubah nggak? Hitung lagi.
    """),
    make_task("heavy_in_chat", True, "chat", """
        en: Anyway, random brain teaser that's bugging me: if 5 machines make 5 widgets in 5 minutes, how long do 100 machines take for 100 widgets, and why do people get it wrong?
        en: So here's the thing: beach trip costs {n6} for 3 days, mountains {n5} for 4 days but needs a {n2} car rental. Per day per person for 3 of us, which is actually cheaper?
        en: Also my nephew asked me why you can't divide by zero and I couldn't prove it properly. Can you give a real argument?
        id: Btw ada teka-teki yang bikin penasaran: kalau 5 mesin bikin 5 barang dalam 5 menit, 100 mesin bikin 100 barang butuh berapa lama? Kenapa banyak yang salah?
        id: Jadi gini: ke pantai {n6} ribu untuk 3 hari, ke gunung {n5} ribu 4 hari tapi harus sewa mobil {n2} ribu. Per hari per orang untuk bertiga, mana yang lebih hemat?
        id: Terus keponakanku nanya kenapa nggak boleh bagi dengan nol dan aku nggak bisa jelasin dengan benar. Bisa kasih argumen yang beneran?
    """),
]
