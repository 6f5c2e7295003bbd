/// <reference path="../../../sandbox/tally.d.ts" />
// Move money between two wallets if the sender has it available (settled + pending holds).

const BALANCE = `query($id: UUID!) { account(id: $id) { code balance(currency: "USD") { available(layer: PENDING) { normalBalance { units } } } } }`;

function available(accountId) {
  return decimal(graphql(BALANCE, { id: accountId }).account.balance.available.normalBalance.units);
}

function run(event) {
  // fee has a default in the input schema ("0"): it is always there.
  const { transaction_id, from, to, amount, fee } = event.data;
  const needed = decimal(amount).plus(fee);
  if (needed.gt(available(from))) {
    fail(`insufficient funds: ${needed} needed`, 'Deposit first, or send less.', { retry: false });
  }
  graphql('mutation($i: TransactionInput!) { postTransaction(input: $i) { transactionId } }', {
    i: { transactionId: transaction_id, tranCode: 'TRANSFER', params: { from, to, amount, fee } },
  });
  return { transaction_id, from_available: available(from).toFixed(2), to_available: available(to).toFixed(2) };
}
